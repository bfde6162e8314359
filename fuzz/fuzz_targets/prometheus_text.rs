//! The Prometheus plugin's `/metrics/detailed` answer as warren reads it: RabbitMQ 3.10 writes
//! queue names into labels without escaping them, so every label and value layout is hostile input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    // The client refuses a body that is not UTF-8 before parsing it.
    let Ok(text) = std::str::from_utf8(body) else { return };
    let scrape = warren::broker::prometheus::parse(text);
    assert!(scrape.skipped_lines <= text.lines().count());
});
