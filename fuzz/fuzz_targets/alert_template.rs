//! Alert description templates (`{queue}`, `{value}`, `{{` ...): validated as a rule's
//! description for a queue metric and for `broker_unreachable`, and filled in as a notification
//! is, with a known value, an unknown one and extreme ones.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warren::alerts::{AlertKey, Comparator, Metric, Rule, Scope, Severity};

fuzz_target!(|data: &[u8]| {
    let Ok(template) = std::str::from_utf8(data) else { return };
    let mut rule = Rule {
        id: "orders-backlog".to_string(),
        name: "Orders backlog".to_string(),
        scope: Scope::default(),
        metric: Metric::Ready,
        comparator: Some(Comparator::Gt),
        threshold: Some(10.0),
        for_secs: 60,
        keep_firing_for_secs: 0,
        severity: Severity::Warning,
        description: Some(template.to_string()),
    };
    let valid = rule.validate().is_empty();
    let key = AlertKey::queue("local", "/", "orders");
    for value in [Some(42.0), Some(12.345), None, Some(f64::MAX), Some(-1e300), Some(f64::NAN), Some(f64::INFINITY)] {
        let text = rule.describe(&key, value);
        if valid && !template.contains(['{', '}']) {
            assert_eq!(text, template, "a template without placeholders is sent as written");
        }
    }
    rule.metric = Metric::BrokerUnreachable;
    rule.comparator = None;
    rule.threshold = None;
    rule.validate();
    rule.describe(&AlertKey::broker("local"), None);
});
