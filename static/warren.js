// One clock for every time on a page and on its charts: UTC (the default, and what the server
// writes: "2026-12-03 09:30:00 UTC") or the browser's local time, as the user chose; the choice
// is kept in the browser (localStorage) and every converted time says its zone.
// The colour theme (issue 34, case 4): "auto" follows the system's preference (warren.css's
// prefers-color-scheme rule), "light" and "dark" are chosen in the top bar and kept in the
// browser, as the clock is.
var warrenTheme = (function () {
  "use strict";
  var KEY = "warren.theme";
  function chosen() {
    try { var t = window.localStorage.getItem(KEY); return t === "light" || t === "dark" ? t : "auto"; } catch (e) { return "auto"; }
  }
  function apply(theme) {
    if (theme === "auto") { document.documentElement.removeAttribute("data-theme"); }
    else { document.documentElement.setAttribute("data-theme", theme); }
  }
  apply(chosen());
  function control() {
    var header = document.querySelector("header.top");
    if (!header || header.querySelector(".theme")) { return; }
    var label = document.createElement("label");
    label.className = "theme";
    label.appendChild(document.createTextNode("Theme "));
    var select = document.createElement("select");
    select.setAttribute("aria-label", "Colour theme");
    [["auto", "Auto"], ["light", "Light"], ["dark", "Dark"]].forEach(function (o) {
      var option = document.createElement("option");
      option.value = o[0];
      option.textContent = o[1];
      select.appendChild(option);
    });
    select.value = chosen();
    select.addEventListener("change", function () {
      try { window.localStorage.setItem(KEY, select.value); } catch (e) { /* this page only */ }
      apply(select.value);
      // Charts draw their axes in the palette's colours: redraw them in the new one.
      if (window.warrenCharts) { window.warrenCharts.forEach(function (c) { c.redraw(false, true); }); }
    });
    label.appendChild(select);
    (header.querySelector(".menu") || header).appendChild(label);
  }
  // After the clock's control, which this file sets up later: the theme comes last in the bar.
  document.addEventListener("DOMContentLoaded", function () { setTimeout(control, 0); });
  // A palette colour by its CSS variable, for what is drawn outside CSS (chart axes and grid).
  function color(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }
  return { chosen: chosen, apply: apply, color: color };
})();

var warrenClock = (function () {
  "use strict";
  var KEY = "warren.clock";
  // Not followed by an offset: "... UTC+05:30" is a time this script already wrote.
  var PATTERN = /(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) UTC(?![+\-\d])/g;
  // Texts that are data, not warren's times: message bodies and headers, code, form fields.
  var VERBATIM = /^(PRE|CODE|SCRIPT|STYLE|TEXTAREA|INPUT|SELECT|OPTION)$/;
  var listeners = [];

  function mode() {
    try { return window.localStorage.getItem(KEY) === "local" ? "local" : "utc"; } catch (e) { return "utc"; }
  }
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  // The zone of a moment: "UTC", or the local offset then ("UTC+05:30"), which changes with
  // daylight saving time, so it is worked out per time, not once.
  function zone(date) {
    if (mode() === "utc") { return "UTC"; }
    var off = -date.getTimezoneOffset();
    var sign = off < 0 ? "-" : "+";
    off = Math.abs(off);
    return "UTC" + sign + pad(Math.floor(off / 60)) + ":" + pad(off % 60);
  }
  function parts(date) {
    var utc = mode() === "utc";
    return {
      y: utc ? date.getUTCFullYear() : date.getFullYear(),
      mo: pad((utc ? date.getUTCMonth() : date.getMonth()) + 1),
      d: pad(utc ? date.getUTCDate() : date.getDate()),
      h: pad(utc ? date.getUTCHours() : date.getHours()),
      mi: pad(utc ? date.getUTCMinutes() : date.getMinutes()),
      s: pad(utc ? date.getUTCSeconds() : date.getSeconds()),
    };
  }
  // "2026-12-03 15:00:00 UTC+05:30"; `short`: without the seconds and the zone (chart ticks).
  function format(secs, short) {
    var date = new Date(secs * 1000);
    var p = parts(date);
    var day = p.y + "-" + p.mo + "-" + p.d;
    if (short === "time") { return p.h + ":" + p.mi; }
    if (short === "seconds") { return p.h + ":" + p.mi + ":" + p.s; }
    if (short === "day") { return p.mo + "-" + p.d + " " + p.h + ":" + p.mi; }
    return day + " " + p.h + ":" + p.mi + ":" + p.s + " " + zone(date);
  }
  // A custom range field's text for a moment ("2026-12-03 09:30", 24-hour, as every time here:
  // a browser's datetime-local widget would show its locale's 12-hour clock), and back, in the
  // chosen clock.
  function fieldValue(secs) {
    var p = parts(new Date(secs * 1000));
    return p.y + "-" + p.mo + "-" + p.d + " " + p.h + ":" + p.mi;
  }
  function fromField(value) {
    var m = /^\s*(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?\s*$/.exec(value);
    if (!m) { return null; }
    var args = [+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +(m[6] || 0)];
    var ms = mode() === "utc" ? Date.UTC.apply(null, args)
      : new Date(args[0], args[1], args[2], args[3], args[4], args[5]).getTime();
    return Math.floor(ms / 1000);
  }
  function describe() {
    if (mode() === "utc") { return "UTC"; }
    var name = "";
    try { name = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { name = ""; }
    return "local time" + (name ? ", " + name : "") + " (" + zone(new Date()) + " now)";
  }

  // A time as an element the clock keeps in the chosen zone.
  function element(secs) {
    var el = document.createElement("time");
    el.setAttribute("datetime", new Date(secs * 1000).toISOString());
    el.dataset.secs = String(secs);
    el.textContent = format(secs);
    return el;
  }

  // Wraps each of warren's UTC times under `root` in a <time> element (once) and writes it in
  // the chosen clock.
  function localize(root) {
    if (!root || !document.createTreeWalker) { return; }
    var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
      acceptNode: function (node) {
        for (var el = node.parentNode; el && el !== root.parentNode; el = el.parentNode) {
          if (el.tagName && (VERBATIM.test(el.tagName) || el.tagName === "TIME")) { return NodeFilter.FILTER_REJECT; }
          // SVG text (a sparkline's <title>) cannot hold an HTML <time>.
          if (el.namespaceURI === "http://www.w3.org/2000/svg") { return NodeFilter.FILTER_REJECT; }
        }
        PATTERN.lastIndex = 0;
        return PATTERN.test(node.nodeValue) ? NodeFilter.FILTER_ACCEPT : NodeFilter.FILTER_REJECT;
      },
    });
    var nodes = [];
    while (walker.nextNode()) { nodes.push(walker.currentNode); }
    nodes.forEach(function (node) {
      var text = node.nodeValue;
      var frag = document.createDocumentFragment();
      var last = 0;
      PATTERN.lastIndex = 0;
      var m;
      while ((m = PATTERN.exec(text)) !== null) {
        frag.appendChild(document.createTextNode(text.slice(last, m.index)));
        var secs = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]) / 1000;
        frag.appendChild(element(secs));
        last = m.index + m[0].length;
      }
      frag.appendChild(document.createTextNode(text.slice(last)));
      node.parentNode.replaceChild(frag, node);
    });
    // Tooltips too (the original kept, for a later change of clock).
    var titled = root.querySelectorAll ? root.querySelectorAll("[title]") : [];
    Array.prototype.forEach.call(titled, function (el) {
      if (el.namespaceURI === "http://www.w3.org/2000/svg") { return; }
      if (el.dataset.utcTitle === undefined) {
        PATTERN.lastIndex = 0;
        if (!PATTERN.test(el.title)) { return; }
        el.dataset.utcTitle = el.title;
      }
      el.title = el.dataset.utcTitle.replace(PATTERN, function (all, y, mo, d, h, mi, s) {
        return format(Date.UTC(+y, +mo - 1, +d, +h, +mi, +s) / 1000);
      });
    });
    root.querySelectorAll("time[data-secs]").forEach(function (el) {
      var text = format(+el.dataset.secs);
      if (el.textContent !== text) { el.textContent = text; }
    });
  }

  function set(choice) {
    try { window.localStorage.setItem(KEY, choice === "local" ? "local" : "utc"); } catch (e) { /* kept for this page only */ }
    localize(document.body);
    listeners.forEach(function (f) { f(); });
  }

  // The choice, in the top bar of every page.
  function control() {
    var header = document.querySelector("header.top");
    if (!header || header.querySelector(".clock")) { return; }
    var label = document.createElement("label");
    label.className = "clock";
    label.appendChild(document.createTextNode("Clock "));
    var select = document.createElement("select");
    select.setAttribute("aria-label", "Clock for all times");
    [["utc", "UTC"], ["local", "Local"]].forEach(function (o) {
      var option = document.createElement("option");
      option.value = o[0];
      option.textContent = o[1];
      select.appendChild(option);
    });
    select.value = mode();
    select.addEventListener("change", function () { set(select.value); });
    label.appendChild(select);
    // In the menu, which a phone folds away.
    (header.querySelector(".menu") || header).appendChild(label);
  }

  document.addEventListener("DOMContentLoaded", function () {
    control();
    localize(document.body);
  });
  // Live fragments bring new times in warren's UTC text.
  document.addEventListener("htmx:afterSettle", function (evt) { localize(evt.detail.elt); });

  return {
    mode: mode, set: set, format: format, zone: zone, describe: describe,
    fieldValue: fieldValue, fromField: fromField, localize: localize, element: element,
    onChange: function (f) { listeners.push(f); },
  };
})();

// Charts: every element with data-chart gets a uPlot chart of the series named in data-series,
// read from the JSON API at data-src ({points: [{ts, <series>...}]}), or, with data-compare (a
// JSON list of {label, src}), one series per source of the one metric in data-series.
// Missing values (null) are drawn as gaps: warren never invents a 0.
//
// The page's time window is in its URL (range=1h, or from/to in unix seconds) and applies to
// every chart on the page: dragging across a chart zooms all of them to that window and puts it
// in the URL, so the view can be shared and a reload keeps it; a fixed window is not refreshed
// away. Relative ranges refresh every 10 s.
var warrenCharts = [];
(function () {
  "use strict";
  var COLORS = ["#3559e0", "#12805c", "#b76e00", "#c0362c", "#7a3fc4", "#0f8fa8", "#6b7280", "#d63384"];
  var WINDOW_PARAMS = ["range", "from", "to"];
  var charts = [];

  function duration(secs) {
    if (secs % 86400 === 0) { return (secs / 86400) + " d"; }
    if (secs % 3600 === 0) { return (secs / 3600) + " h"; }
    if (secs % 60 === 0) { return (secs / 60) + " min"; }
    return secs + " s";
  }

  // Which data a chart shows: long ranges come from warren's roll-ups, where each point is the
  // average of a step (min, max and last are in the JSON).
  function resolutionText(body) {
    if (body.note) { return body.note; }
    if (!body.resolution || !body.step) { return ""; }
    if (body.resolution === "raw") { return "Raw samples, a point every " + duration(body.step) + "."; }
    var source = body.resolution === "1h" ? "1-hour" : "1-minute";
    return "From " + source + " roll-ups: averages per " + duration(body.step) + ".";
  }

  // The page's window: what its URL says, else nothing (each chart's own data-src decides).
  function pageWindow() {
    var params = new URLSearchParams(window.location.search);
    var w = {};
    WINDOW_PARAMS.forEach(function (k) { if (params.get(k)) { w[k] = params.get(k); } });
    return w;
  }
  function withWindow(src, w) {
    var url = new URL(src, window.location.href);
    if (w.range || w.from || w.to) {
      WINDOW_PARAMS.forEach(function (k) { url.searchParams.delete(k); });
      WINDOW_PARAMS.forEach(function (k) { if (w[k]) { url.searchParams.set(k, w[k]); } });
    }
    return url.pathname + url.search;
  }
  function fixed(w) { return Boolean(w.to); }

  // Data rows for uPlot: x = times, one row per series. `null` is a gap in the data (drawn as
  // one); `undefined` is a time only another source has (joined over, not a gap).
  // A point's time in unix seconds, from its RFC 3339 `ts_rfc3339` (`ts`, unix seconds, is
  // deprecated in the API and goes in the next release).
  function pointSecs(p) { return p.ts_rfc3339 ? Date.parse(p.ts_rfc3339) / 1000 : p.ts; }
  function merge(bodies, names, compare) {
    var times = {};
    bodies.forEach(function (b) { (b.points || []).forEach(function (p) { times[pointSecs(p)] = true; }); });
    var xs = Object.keys(times).map(Number).sort(function (a, b) { return a - b; });
    var data = [xs];
    bodies.forEach(function (b, i) {
      var byTs = {};
      (b.points || []).forEach(function (p) { byTs[pointSecs(p)] = p; });
      var series = compare ? [names[0]] : names;
      series.forEach(function (name) {
        data.push(xs.map(function (t) {
          var p = byTs[t];
          if (!p) { return undefined; }
          return p[name] === undefined ? null : p[name];
        }));
      });
    });
    return data;
  }

  // A new queue's 30-day chart is an hour of data at the right edge: start the chart where the
  // data starts and say so, rather than draw a month of nothing.
  function trimLeading(data) {
    var first = -1;
    for (var i = 0; i < data[0].length && first < 0; i++) {
      for (var s = 1; s < data.length; s++) {
        if (data[s][i] !== null && data[s][i] !== undefined) { first = i; break; }
      }
    }
    if (first <= 0) { return { data: data, since: first < 0 ? null : undefined }; }
    return { data: data.map(function (row) { return row.slice(first); }), since: data[0][first] };
  }

  // Charts of one page that read the same history (the compare page: six charts of the same
  // queues) share one request per refresh.
  var recent = {};
  function getJson(url) {
    var hit = recent[url];
    if (hit && Date.now() - hit.at < 2000) { return hit.promise; }
    var promise = fetch(url, { headers: { "Accept": "application/json" } }).then(function (r) {
      if (!r.ok) { return r.text().then(function (t) { throw new Error("HTTP " + r.status + ": " + t.slice(0, 200)); }); }
      return r.json();
    });
    recent[url] = { at: Date.now(), promise: promise };
    return promise;
  }

  function tickFormat(u, splits) {
    var span = u.scales.x.max - u.scales.x.min;
    var style = span < 600 ? "seconds" : span <= 2 * 86400 ? "time" : "day";
    return splits.map(function (s) { return warrenClock.format(s, style); });
  }

  // A value for an axis tick or the legend: bytes in binary units, large counts in k and M, so
  // that a node's 8 GB memory reads "8 GiB", not a number clipped to "000,000,000".
  function compact(v, unit) {
    if (v == null) { return "--"; }
    var abs = Math.abs(v);
    if (unit === "bytes") {
      var units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
      var i = 0;
      while (abs >= 1024 && i < units.length - 1) { abs /= 1024; v /= 1024; i++; }
      return +v.toPrecision(3) + " " + units[i];
    }
    if (abs >= 1e9) { return +(v / 1e9).toPrecision(3) + "G"; }
    if (abs >= 1e6) { return +(v / 1e6).toPrecision(3) + "M"; }
    if (abs >= 1e4) { return +(v / 1e3).toPrecision(3) + "k"; }
    return v.toLocaleString();
  }

  // Byte axes tick at round binary values (16 GiB, 32 GiB, ...): uPlot's decimal steps put
  // them at 69.8 / 46.6 / 23.3 GiB (issue 34, case 6).
  var BYTE_INCRS = [];
  [1, 1024, 1048576, 1073741824, 1099511627776].forEach(function (scale) {
    [1, 2, 4, 8, 16, 32, 64, 128, 256, 512].forEach(function (m) { BYTE_INCRS.push(m * scale); });
  });

  function makeChart(el) {
    var names = el.dataset.series.split(",");
    var sources = el.dataset.compare ? JSON.parse(el.dataset.compare) : [{ label: null, src: el.dataset.src }];
    var compare = Boolean(el.dataset.compare);
    var unit = el.dataset.unit || "";
    var chart = null;
    var lastData = null;
    var note = document.createElement("p");
    note.className = "chart-resolution hint";
    el.parentNode.appendChild(note);

    function options() {
      var labels = compare ? sources.map(function (s) { return s.label; }) : names.map(function (n) { return n.replace(/_/g, " "); });
      var valueAxis = { label: unit, size: unit === "bytes" ? 76 : 60, values: function (u, splits) { return splits.map(function (v) { return compact(v, unit); }); },
        stroke: function () { return warrenTheme.color("--fg"); }, grid: { stroke: function () { return warrenTheme.color("--line"); } },
        ticks: { stroke: function () { return warrenTheme.color("--line"); } } };
      if (unit === "bytes") { valueAxis.incrs = BYTE_INCRS; }
      return {
        width: Math.max(el.clientWidth, 280), height: 220,
        // Room on the right for the last time label, which was cut off at the chart's edge.
        padding: [null, 28, null, null],
        tzDate: function (ts) {
          var d = new Date(ts * 1000);
          return warrenClock.mode() === "utc" ? uPlot.tzDate(d, "Etc/UTC") : d;
        },
        scales: { x: { time: true } },
        cursor: { drag: { x: true, y: false, setScale: false } },
        axes: [
          { label: "time (" + warrenClock.zone(new Date()) + ")", values: tickFormat, labelSize: 20, space: 70,
            stroke: function () { return warrenTheme.color("--fg"); }, grid: { stroke: function () { return warrenTheme.color("--line"); } },
            ticks: { stroke: function () { return warrenTheme.color("--line"); } } },
          valueAxis,
        ],
        series: [{ label: "time", value: function (u, v) { return v == null ? "--" : warrenClock.format(v); } }]
          .concat(labels.map(function (label, i) {
            return {
              label: label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false,
              // The legend keeps exact counts; only bytes read better in units.
              value: function (u, v) { return v == null ? "--" : unit === "bytes" ? compact(v, unit) : v.toLocaleString(); },
            };
          })),
        hooks: {
          setSelect: [function (u) {
            if (u.select.width < 5) { return; }
            var from = Math.floor(u.posToVal(u.select.left, "x"));
            var to = Math.ceil(u.posToVal(u.select.left + u.select.width, "x"));
            u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
            zoom(from, to);
          }],
        },
      };
    }
    function draw(data) {
      lastData = data;
      if (chart) { chart.setData(data); return; }
      el.textContent = "";
      chart = new uPlot(options(), data, el);
      warrenCharts.push(chart);
    }
    function load() {
      var w = pageWindow();
      Promise.all(sources.map(function (s) { return getJson(withWindow(s.src, w)); }))
        .then(function (bodies) {
          var trimmed = trimLeading(merge(bodies, names, compare));
          var text = resolutionText(bodies[0]);
          if (trimmed.since === null) {
            text = "No data in this window. " + text;
          } else if (trimmed.since !== undefined) {
            text = "No data before " + warrenClock.format(trimmed.since) + ": the chart starts there. " + text;
          }
          note.textContent = text;
          draw(trimmed.data);
        })
        .catch(function (err) { el.textContent = "chart unavailable: " + err.message; });
    }
    // A clock change redraws the chart (uPlot takes the zone when it is made).
    function redraw() {
      if (!chart || !lastData) { return; }
      warrenCharts.splice(warrenCharts.indexOf(chart), 1);
      chart.destroy();
      chart = null;
      draw(lastData);
      load();
    }
    load();
    setInterval(function () { if (!fixed(pageWindow())) { load(); } }, 10000);
    window.addEventListener("resize", function () {
      if (chart) { chart.setSize({ width: Math.max(el.clientWidth, 280), height: 220 }); }
    });
    return { load: load, redraw: redraw };
  }

  // The window shown, as unix seconds (from the page as served, then from each zoom).
  var shown = {};

  // The range picker shows the window in the chosen clock.
  function showWindow() {
    var picker = document.querySelector("[data-range-picker]");
    if (!picker || shown.from === undefined || shown.to === undefined) { return; }
    var f = picker.querySelector("[data-window-from]");
    var t = picker.querySelector("[data-window-to]");
    if (f) { f.replaceChildren(warrenClock.element(shown.from)); }
    if (t) { t.replaceChildren(warrenClock.element(shown.to)); }
    var fields = picker.querySelectorAll("form.custom-range input.when");
    if (fields.length === 2) {
      fields[0].value = warrenClock.fieldValue(shown.from);
      fields[1].value = warrenClock.fieldValue(shown.to);
      fields[0].defaultValue = fields[0].value;
      fields[1].defaultValue = fields[1].value;
    }
    var noteEl = picker.querySelector(".clock-note");
    if (noteEl) { noteEl.textContent = "times in " + warrenClock.describe(); }
  }

  function zoom(from, to) {
    if (!(to > from)) { return; }
    var params = new URLSearchParams(window.location.search);
    params.delete("range");
    params.set("from", String(from));
    params.set("to", String(to));
    window.history.pushState({ from: from, to: to }, "", window.location.pathname + "?" + params.toString());
    var picker = document.querySelector("[data-range-picker]");
    if (picker) {
      picker.querySelectorAll(".ranges a.active").forEach(function (a) { a.classList.remove("active"); });
      var reset = picker.querySelector(".reset-zoom");
      if (reset) { reset.hidden = false; }
    }
    shown = { from: from, to: to };
    showWindow();
    charts.forEach(function (c) { c.load(); });
  }

  // The window's ends as the page was served (UTC text, made <time> by the clock), and the
  // custom range form, read in the chosen clock and sent as unix seconds.
  function initPicker() {
    var picker = document.querySelector("[data-range-picker]");
    if (!picker) { return; }
    var secs = function (sel) {
      var el = picker.querySelector(sel + " time[data-secs]");
      return el ? +el.dataset.secs : undefined;
    };
    shown = { from: secs("[data-window-from]"), to: secs("[data-window-to]") };
    showWindow();
    var form = picker.querySelector("form.custom-range");
    if (!form) { return; }
    form.addEventListener("submit", function (evt) {
      var fields = form.querySelectorAll("input.when");
      var from = warrenClock.fromField(fields[0].value);
      var to = warrenClock.fromField(fields[1].value);
      if (from === null || to === null) { return; }
      evt.preventDefault();
      var params = new URLSearchParams(window.location.search);
      params.delete("range");
      params.set("from", String(from));
      params.set("to", String(to));
      window.location.search = params.toString();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (typeof uPlot === "undefined") { return; }
    // After the clock's own DOMContentLoaded work (registered first): times are <time> now.
    initPicker();
    document.querySelectorAll("[data-chart]").forEach(function (el) { charts.push(makeChart(el)); });
    warrenClock.onChange(function () {
      showWindow();
      charts.forEach(function (c) { c.redraw(); });
    });
    window.addEventListener("popstate", function () { window.location.reload(); });
  });
})();

// Queues ticked in the queue list for the compare page: kept across its live refreshes and its
// pages (sessionStorage), sent as q=<queue path> each.
(function () {
  "use strict";
  var KEY = "warren.compare";
  var MAX = 8;
  function ticked() {
    try { return JSON.parse(window.sessionStorage.getItem(KEY) || "[]"); } catch (e) { return []; }
  }
  function save(list) {
    try { window.sessionStorage.setItem(KEY, JSON.stringify(list)); } catch (e) { /* this page only */ }
  }
  function show() {
    var list = ticked();
    document.querySelectorAll("input.pick").forEach(function (box) { box.checked = list.indexOf(box.value) >= 0; });
    var count = document.querySelector("#compare .count");
    if (count) {
      count.textContent = list.length === 0 ? "tick up to " + MAX + " queues"
        : list.length + " ticked" + (list.length > MAX ? ": at most " + MAX + " fit on one chart" : "");
    }
    var clear = document.querySelector("#compare .clear");
    if (clear) { clear.hidden = list.length === 0; }
  }
  document.addEventListener("change", function (evt) {
    var box = evt.target;
    if (!box.classList || !box.classList.contains("pick")) { return; }
    var list = ticked().filter(function (v) { return v !== box.value; });
    if (box.checked) { list.push(box.value); }
    save(list);
    show();
  });
  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("compare");
    if (!form) { return; }
    show();
    form.addEventListener("submit", function (evt) {
      evt.preventDefault();
      var list = ticked();
      if (list.length === 0 || list.length > MAX) { show(); return; }
      // The form's own action, which carries the base path warren is served under.
      window.location.href = form.action + "?" + list.map(function (v) { return "q=" + encodeURIComponent(v); }).join("&");
    });
    var clear = form.querySelector(".clear");
    if (clear) { clear.addEventListener("click", function () { save([]); show(); }); }
  });
  document.addEventListener("htmx:afterSettle", show);
})();

// A region that refreshes itself (hx-trigger "every ...") skips its refresh while the user is
// typing in one of its fields, or has changed one: the swap would throw away what they typed.
(function () {
  "use strict";
  function editing(region) {
    var active = document.activeElement;
    if (active && region.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) { return true; }
    var fields = region.querySelectorAll("input:not([type=hidden]), textarea");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value !== fields[i].defaultValue) { return true; }
    }
    return false;
  }
  document.addEventListener("htmx:beforeRequest", function (evt) {
    var region = evt.detail.elt;
    var trigger = region.getAttribute && region.getAttribute("hx-trigger");
    if (trigger && trigger.indexOf("every") === 0 && editing(region)) { evt.preventDefault(); }
  });
})();

// Freshness: every live fragment carries one indicator (templates/_freshness.html) with the
// time its data was obtained. This ticks it as "Updated 4 s ago" and turns it into a stale
// warning when that data gets older than the threshold the server set (data-stale-after), or
// when warren stops answering the fragments' refreshes: the numbers on screen are then old,
// and the page must say so rather than keep showing them as if they were current.
(function () {
  "use strict";
  // When this document first saw each indicator (by the browser's clock). The age is the
  // server's (rendered - updated) plus the time since: a browser clock that is off does not
  // matter.
  var seenAt = new WeakMap();
  // Set while warren does not answer: { since: unix seconds, text }.
  var failure = null;

  // In the clock the user chose (the stale texts are written after the page's times were).
  function utc(secs) {
    return warrenClock.format(secs);
  }

  function ago(secs) {
    var s = Math.max(0, Math.floor(secs));
    if (s < 60) { return s + " s ago"; }
    if (s < 3600) { return Math.floor(s / 60) + " min ago"; }
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min ago";
  }

  function setText(el, text) {
    // Only on change: stale and failure texts then stay put for screen readers and for
    // scripts that rewrite the times in them.
    if (el.textContent !== text) { el.textContent = text; }
  }

  function render(el, now) {
    if (!seenAt.has(el)) { seenAt.set(el, now); }
    var age = el.querySelector(".freshness-age");
    if (!age) { return; }
    var kind = el.dataset.kind;
    var hasData = el.dataset.updated !== undefined;
    var updated = Number(el.dataset.updated);
    var secs = Number(el.dataset.rendered) - updated + (now - seenAt.get(el));
    var source = el.dataset.source ? " " + el.dataset.source : "";
    var stale = false;
    var text;
    if (kind === "live" && failure) {
      stale = true;
      text = failure.text + " since " + utc(failure.since) +
        (hasData ? " (showing data from " + utc(updated) + ")." : ".");
    } else if (!hasData) {
      return;
    } else if (kind === "live" && secs > Number(el.dataset.staleAfter)) {
      stale = true;
      text = "Stale: no new data" + source + " since " + utc(updated) + ".";
    } else if (kind === "snapshot") {
      text = "Snapshot taken " + ago(secs) + ":";
    } else if (kind === "still") {
      text = "As of " + ago(secs) + ".";
    } else {
      text = "Updated " + ago(secs) + ".";
    }
    setText(age, text);
    el.classList.toggle("stale", stale);
    if (stale) { el.setAttribute("role", "alert"); } else { el.removeAttribute("role"); }
  }

  function tick() {
    var now = Date.now() / 1000;
    document.querySelectorAll(".freshness[data-kind]").forEach(function (el) { render(el, now); });
  }

  // A region that refreshes itself ("every ..."): its failed answers are warren's failures.
  function polling(elt) {
    var trigger = elt && elt.getAttribute && elt.getAttribute("hx-trigger");
    return !!trigger && trigger.indexOf("every") === 0;
  }

  // No answer at all (warren stopped, network gone). htmx keeps polling, so the first answer
  // after that clears it.
  document.addEventListener("htmx:sendError", function () {
    if (!failure) { failure = { since: Date.now() / 1000, text: "warren is not answering" }; }
    tick();
  });
  document.addEventListener("htmx:responseError", function (evt) {
    // A form's refused input (422) is an answer; a refresh answered with an error is not data.
    if (!polling(evt.detail.elt)) { return; }
    if (!failure) {
      var status = evt.detail.xhr ? evt.detail.xhr.status : "?";
      failure = { since: Date.now() / 1000, text: "warren answers with errors (HTTP " + status + ")" };
    }
    tick();
  });
  document.addEventListener("htmx:afterRequest", function (evt) {
    if (evt.detail.successful && failure) { failure = null; tick(); }
  });
  // A swapped-in fragment brings a new indicator: show its age at once.
  document.addEventListener("htmx:load", tick);
  document.addEventListener("DOMContentLoaded", function () {
    tick();
    setInterval(tick, 1000);
  });
})();

// The dead-letter browser's "select every message on this page" box (issue 19, item 14): it ticks
// every enabled message checkbox of its table, and shows whether all, some or none are ticked.
// Custody's records table has the same box for its record checkboxes (issue 34, case 6).
// Delegated, so tables swapped in later work too.
(function () {
  "use strict";
  function boxes(table) {
    return Array.prototype.filter.call(
      table.querySelectorAll('tbody input[type="checkbox"][name="message"], tbody input[type="checkbox"][name="record"]'),
      function (box) { return !box.disabled; }
    );
  }
  document.addEventListener("change", function (evt) {
    var target = evt.target;
    if (!target || !target.matches || !target.closest) { return; }
    var table = target.closest("table.messages, table.custody-records");
    if (!table) { return; }
    var all = table.querySelector("input.select-all");
    if (!all) { return; }
    var list = boxes(table);
    if (target === all) {
      list.forEach(function (box) { box.checked = all.checked; });
      all.indeterminate = false;
      return;
    }
    if (target.name !== "message" && target.name !== "record") { return; }
    var ticked = list.filter(function (box) { return box.checked; }).length;
    all.checked = ticked > 0 && ticked === list.length;
    all.indeterminate = ticked > 0 && ticked < list.length;
  });
})();

// The skip link moves the focus itself: following a fragment only scrolls in some browsers, and
// the next Tab then starts from the top again.
(function () {
  "use strict";
  document.addEventListener("click", function (evt) {
    var link = evt.target && evt.target.closest ? evt.target.closest("a.skip-link") : null;
    if (!link) { return; }
    var target = document.getElementById(link.getAttribute("href").slice(1));
    if (!target) { return; }
    evt.preventDefault();
    target.focus();
  });
})();

// Enter on a checkbox ticks it (issue 34, case 3): a browser submits the form instead, and on
// the dead-letter browser that was "Requeue selected…" with nothing selected.
(function () {
  "use strict";
  document.addEventListener("keydown", function (evt) {
    var target = evt.target;
    if (evt.key !== "Enter" || !target || target.type !== "checkbox" || target.tagName !== "INPUT") { return; }
    evt.preventDefault();
    if (target.disabled) { return; }
    target.checked = !target.checked;
    target.dispatchEvent(new Event("change", { bubbles: true }));
  });
})();
