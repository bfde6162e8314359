//! Description templates: the text of a notification, with placeholders filled from the alert.

use super::eval::AlertKey;
use super::rule::{Comparator, Metric, Rule};

/// The placeholders a description template may use, each written `{name}`; `{{` and `}}` are
/// literal braces.
pub const PLACEHOLDERS: [&str; 8] = ["rule", "metric", "broker", "vhost", "queue", "value", "threshold", "node"];

/// Whole numbers without decimals (counts), others with two (rates, ages).
fn format_value(value: Option<f64>) -> String {
    match value {
        None => "unknown".to_string(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Some(v) => format!("{v:.2}"),
    }
}

#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(&'a str),
    Placeholder(&'a str),
}

/// Splits a description template into text and known placeholders.
fn parse_template(template: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        pieces.push(Piece::Text(&rest[..i]));
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("{{") {
            pieces.push(Piece::Text("{"));
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            pieces.push(Piece::Text("}"));
            rest = after;
        } else if tail.starts_with('}') {
            return Err("a lone } must be written }}".to_string());
        } else {
            let end = tail.find('}').ok_or_else(|| "a { is not closed; write {{ for a literal brace".to_string())?;
            let name = &tail[1..end];
            if !PLACEHOLDERS.contains(&name) {
                return Err(format!("unknown placeholder {{{name}}}; known: {}", PLACEHOLDERS.join(", ")));
            }
            pieces.push(Piece::Placeholder(name));
            rest = &tail[end + 1..];
        }
    }
    pieces.push(Piece::Text(rest));
    Ok(pieces)
}

/// What is wrong with a description template, if anything.
pub(super) fn template_problem(template: &str, metric: Metric) -> Option<String> {
    let pieces = match parse_template(template) {
        Ok(pieces) => pieces,
        Err(message) => return Some(message),
    };
    if !metric.is_broker_level() {
        return None;
    }
    // A broker-level alert has no queue, and `broker_unreachable` no number, to fill in.
    let queue_only: &[&str] = if metric == Metric::BrokerUnreachable {
        &["vhost", "queue", "value", "threshold", "node"]
    } else {
        &["vhost", "queue", "node"]
    };
    pieces.iter().find_map(|piece| match piece {
        Piece::Placeholder(name) if queue_only.contains(name) => {
            Some(format!("{{{name}}} has no value for {}", metric.as_str()))
        }
        _ => None,
    })
}

impl Rule {
    /// The notification text for one alert of this rule: the description template filled in,
    /// or a generated sentence. An unknown value reads "unknown", never 0.
    pub fn describe(&self, key: &AlertKey, value: Option<f64>) -> String {
        let Some(template) = &self.description else {
            return match self.metric {
                Metric::BrokerUnreachable => format!("{}: broker {} does not answer", self.name, key.broker),
                metric => format!(
                    "{}: {} is {} ({} {}) for {key}",
                    self.name,
                    metric.as_str(),
                    format_value(value),
                    self.comparator.map_or("?", Comparator::as_str),
                    format_value(self.threshold),
                ),
            };
        };
        // A template that does not parse (a rule that skipped validation) is shown as written.
        let Ok(pieces) = parse_template(template) else {
            return template.clone();
        };
        pieces
            .iter()
            .map(|piece| match *piece {
                Piece::Text(text) => text.to_string(),
                Piece::Placeholder("rule") => self.name.clone(),
                Piece::Placeholder("metric") => self.metric.as_str().to_string(),
                Piece::Placeholder("broker") => key.broker.clone(),
                Piece::Placeholder("vhost") => key.vhost.clone().unwrap_or_default(),
                Piece::Placeholder("queue") => key.queue.clone().unwrap_or_default(),
                Piece::Placeholder("node") => key.node.clone().unwrap_or_default(),
                Piece::Placeholder("value") => format_value(value),
                Piece::Placeholder("threshold") => format_value(self.threshold),
                Piece::Placeholder(_) => String::new(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::rule::{Scope, Severity};

    fn rule(metric: Metric) -> Rule {
        Rule {
            id: "orders-backlog".to_string(),
            name: "Orders backlog".to_string(),
            scope: Scope::default(),
            metric,
            comparator: Some(Comparator::Gt),
            threshold: Some(10.0),
            for_secs: 60,
            keep_firing_for_secs: 0,
            severity: Severity::Warning,
            description: None,
        }
    }

    #[test]
    fn descriptions_fill_placeholders() {
        let key = AlertKey::queue("local", "/", "orders");
        let mut r = rule(Metric::Ready);
        assert_eq!(
            r.describe(&key, Some(42.0)),
            "Orders backlog: ready is 42 (> 10) for queue 'orders' (vhost '/', broker 'local')"
        );
        r.description = Some("{{{queue}}} on {broker}: {value} {metric} over {threshold} ({rule})".to_string());
        assert_eq!(r.describe(&key, Some(12.5)), "{orders} on local: 12.50 ready over 10 (Orders backlog)");
        assert_eq!(r.describe(&key, None), "{orders} on local: unknown ready over 10 (Orders backlog)");
        let down = Rule { metric: Metric::BrokerUnreachable, comparator: None, threshold: None, ..rule(Metric::Ready) };
        assert_eq!(down.describe(&AlertKey::broker("local"), None), "Orders backlog: broker local does not answer");
    }

    #[test]
    fn template_problems() {
        assert_eq!(template_problem("{queue}: {value}", Metric::Ready), None);
        assert_eq!(template_problem("{{literal}}", Metric::Ready), None);
        assert!(template_problem("{queue", Metric::Ready).unwrap().contains("not closed"));
        assert!(template_problem("a } b", Metric::Ready).unwrap().contains("lone }"));
        assert!(template_problem("{colour}", Metric::Ready).unwrap().contains("unknown placeholder {colour}"));
        assert!(template_problem("{broker} down", Metric::BrokerUnreachable).is_none());
        assert!(template_problem("{queue} down", Metric::BrokerUnreachable).is_some());
    }
}
