//! How a dead letter's payload is shown: its bytes (base64 decoded where the broker had to use
//! it), and as pretty JSON in its own key order, as text, or as a hex dump.

use base64::Engine;
use serde_json::Value;

use crate::broker::management::PeekedMessage;

/// The payload as bytes, borrowed where it is text (decoded where the broker had to use base64).
pub fn payload(m: &PeekedMessage) -> std::borrow::Cow<'_, [u8]> {
    if m.payload_encoding == "base64" {
        std::borrow::Cow::Owned(payload_bytes(m))
    } else {
        std::borrow::Cow::Borrowed(m.payload.as_bytes())
    }
}

/// The payload as bytes (decoding base64 where the broker had to use it).
pub fn payload_bytes(m: &PeekedMessage) -> Vec<u8> {
    if m.payload_encoding == "base64" {
        base64::engine::general_purpose::STANDARD.decode(&m.payload).unwrap_or_else(|_| m.payload.clone().into_bytes())
    } else {
        m.payload.clone().into_bytes()
    }
}

/// How to show a payload: pretty JSON, text, or a hex dump for binary.
pub fn render_payload(m: &PeekedMessage) -> (&'static str, String) {
    let bytes = payload_bytes(m);
    if let Ok(text) = std::str::from_utf8(&bytes) {
        // Valid JSON is laid out again in its own key order: `Value` would sort the keys, and
        // the order an application wrote them in is part of how people read it (issue 17, case 4).
        // Checked as a `Value`, not merely as JSON: `1e400` is JSON that no `Value` holds (the
        // fuzzer found it), and what is shown as JSON must parse as it is shown.
        if serde_json::from_str::<Value>(text).is_ok() {
            return ("json", indent_json(text));
        }
        if !text.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
            return ("text", text.to_string());
        }
    }
    let mut dump = String::new();
    for (row, chunk) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String =
            chunk.iter().map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }).collect();
        dump.push_str(&format!("{:08x}  {:<48}  {ascii}\n", row * 16, hex.join(" ")));
    }
    ("hex", dump)
}

/// Lays out valid JSON text with two-space indents, keys in the order they are written. Only
/// whitespace outside strings changes.
fn indent_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // An empty object or array stays on one line.
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    out.push(chars.next().expect("peeked"));
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    #[test]
    fn json_keeps_its_key_order_and_its_strings() {
        let text = r#"{"zeta": 1, "alpha": {"b": [1, {}, []], "a": "x, {y}: \"z\""}, "empty": {}}"#;
        let laid_out = indent_json(text);
        assert_eq!(
            laid_out,
            "{\n  \"zeta\": 1,\n  \"alpha\": {\n    \"b\": [\n      1,\n      {},\n      []\n    ],\n    \
             \"a\": \"x, {y}: \\\"z\\\"\"\n  },\n  \"empty\": {}\n}"
        );
        let again: Value = serde_json::from_str(&laid_out).unwrap();
        assert_eq!(again, serde_json::from_str::<Value>(text).unwrap(), "the same JSON");
    }

    /// A crash of the `message_render` fuzz target: a number past `f64` is JSON, and was shown
    /// as JSON that does not parse back; it is text.
    #[test]
    fn json_that_no_value_holds_is_shown_as_text() {
        let m = PeekedMessage {
            payload: "[3.3E333333]".to_string(),
            payload_encoding: "string".to_string(),
            payload_bytes: 12,
            ..serde_json::from_value(serde_json::json!({})).unwrap()
        };
        assert_eq!(render_payload(&m), ("text", "[3.3E333333]".to_string()));
    }

    #[test]
    fn binary_payloads_are_hex() {
        let m = PeekedMessage {
            exchange: String::new(),
            routing_key: String::new(),
            redelivered: false,
            payload_bytes: 3,
            payload_encoding: "base64".into(),
            payload: base64::engine::general_purpose::STANDARD.encode([0xff, 0x00, 0x41]),
            properties: Map::new(),
        };
        let (kind, dump) = render_payload(&m);
        assert_eq!(kind, "hex");
        assert!(dump.starts_with("00000000  ff 00 41"), "{dump}");
    }
}
