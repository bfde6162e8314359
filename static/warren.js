// Charts: every element with data-chart gets a uPlot chart of the series named in data-series,
// read from the JSON API at data-src ({points: [{ts, <series>...}]}), refreshed every 10 s.
// Missing values (null) are drawn as gaps: warren never invents a 0.
(function () {
  "use strict";
  var COLORS = ["#3559e0", "#12805c", "#b76e00", "#c0362c", "#7a3fc4", "#0f8fa8"];

  function seriesData(points, names) {
    var data = [points.map(function (p) { return p.ts; })];
    names.forEach(function (name) {
      data.push(points.map(function (p) { return p[name] === undefined ? null : p[name]; }));
    });
    return data;
  }

  function duration(secs) {
    if (secs % 3600 === 0) { return (secs / 3600) + " h"; }
    if (secs % 60 === 0) { return (secs / 60) + " min"; }
    return secs + " s";
  }

  // Which data a chart shows: long ranges come from warren's roll-ups, where each point is the
  // average of a step (min, max and last are in the JSON).
  function resolutionText(body) {
    if (!body.resolution || !body.step) { return ""; }
    if (body.resolution === "raw") { return "Raw samples, a point every " + duration(body.step) + "."; }
    var source = body.resolution === "1h" ? "1-hour" : "1-minute";
    return "From " + source + " roll-ups: averages per " + duration(body.step) + ".";
  }

  function makeChart(el) {
    var names = el.dataset.series.split(",");
    var unit = el.dataset.unit || "";
    var chart = null;
    var note = document.createElement("p");
    note.className = "chart-resolution hint";
    el.parentNode.appendChild(note);
    function load() {
      fetch(el.dataset.src, { headers: { "Accept": "application/json" } })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
        .then(function (body) {
          note.textContent = resolutionText(body);
          var data = seriesData(body.points || [], names);
          if (chart) { chart.setData(data); return; }
          var opts = {
            width: Math.max(el.clientWidth, 300), height: 220,
            scales: { x: { time: true } },
            axes: [{}, { label: unit, size: 60 }],
            series: [{}].concat(names.map(function (name, i) {
              return { label: name.replace(/_/g, " "), stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false };
            })),
          };
          el.textContent = "";
          chart = new uPlot(opts, data, el);
        })
        .catch(function (err) { el.textContent = "chart unavailable: " + err.message; });
    }
    load();
    setInterval(load, 10000);
    window.addEventListener("resize", function () {
      if (chart) { chart.setSize({ width: Math.max(el.clientWidth, 300), height: 220 }); }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (typeof uPlot === "undefined") { return; }
    document.querySelectorAll("[data-chart]").forEach(makeChart);
  });
})();
