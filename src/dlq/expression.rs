//! A filter's regular expression, bounded (issue 29, must-have 4): in the size of its program,
//! in what of a record it reads, and in time, checked as it reads (`dlq::budget`). Pure.
//!
//! One match of the regex crate cannot be interrupted, and its rate falls with the program's
//! size and the text: at the old 1 MiB limit `(?:[a-zA-Z0-9 ][a-zA-Z0-9 ]?){1,2000}[^a-zA-Z0-9 ]`
//! matched at 15-26 KB/s, and within 256 KiB `a[ab]{3000}c` still runs at 25 KB/s over a text of
//! a's and b's (its NFA simulation steps 3,000 states a byte). No size limit that leaves `\w+`
//! room makes every match fast, so a longer text is read by a lazy DFA walked byte by byte,
//! which stops between two pieces when its budget says so.

use std::sync::Arc;

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::Input;

use super::budget::{Check, Stopped};

/// Compiled programs of regular expressions from requests are bounded (the regex crate allows
/// 10 MiB). What operators search for (`(?i)`, ids, dates, `\w+@\w+\.com`) compiles to under
/// 128 KiB; Unicode classes repeated many times (`\w{10}`) do not fit, `(?-u:\w){10}` does.
const SIZE_LIMIT: usize = 256 << 10;

/// An expression reads the first this many bytes of a payload and of the properties (as JSON):
/// a record's cost is bounded whatever its size. Text, header and JSON filters read it whole.
pub const SCAN_BYTES: usize = 1 << 20;

/// A text up to this long is matched by the regex crate in one go (its literal prefilters make
/// a search of a typical dead letter fastest): at the slowest rate above, 0.16 s.
const ONE_GO_BYTES: usize = 4 << 10;

/// How many bytes the lazy DFA reads between two checks of the budget.
const CHECK_EVERY_BYTES: usize = 4 << 10;

/// A compiled expression: the regex crate's, and a lazy DFA of the same pattern for long texts
/// (none where the pattern has what a DFA cannot do).
#[derive(Debug, Clone)]
pub struct Expression {
    regex: regex::bytes::Regex,
    dfa: Option<Arc<DFA>>,
}

impl Expression {
    /// Compiles `pattern`, or says why not in words for a 400.
    pub fn compile(pattern: &str) -> Result<Expression, String> {
        let regex = regex::bytes::RegexBuilder::new(pattern).size_limit(SIZE_LIMIT).build().map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => format!(
                "regex: compiles to a program larger than {} KiB: repeat less (a{{1,100}} rather than a{{1,2000}}), \
                 or use ASCII classes ((?-u:\\w) rather than \\w)",
                SIZE_LIMIT >> 10
            ),
            e => format!("regex: {}", e.to_string().lines().last().unwrap_or("not a regular expression")),
        })?;
        // As `regex::bytes` reads it: any byte, `(?-u)\xff` allowed. A Unicode word boundary
        // makes the DFA quit at a non-ASCII byte (the regex crate then reads on).
        let dfa = DFA::builder()
            .configure(DFA::config().unicode_word_boundary(true))
            .syntax(regex_automata::util::syntax::Config::new().utf8(false))
            .thompson(regex_automata::nfa::thompson::Config::new().utf8(false).nfa_size_limit(Some(SIZE_LIMIT)))
            .build(pattern)
            .ok()
            .map(Arc::new);
        Ok(Expression { regex, dfa })
    }

    /// A searcher for many texts in a row (the lazy DFA's cache is kept between them).
    pub fn searcher(&self) -> Searcher<'_> {
        Searcher { expression: self, cache: self.dfa.as_ref().map(|dfa| dfa.create_cache()) }
    }
}

/// What of `text` an expression reads.
pub fn head(text: &[u8]) -> &[u8] {
    &text[..text.len().min(SCAN_BYTES)]
}

pub struct Searcher<'a> {
    expression: &'a Expression,
    cache: Option<Cache>,
}

impl Searcher<'_> {
    /// Whether the expression matches in what it reads of a payload or of properties.
    pub fn in_record(&mut self, payload: &[u8], properties: &[u8], check: Option<&Check>) -> Result<bool, Stopped> {
        Ok(self.is_match(payload, check)? || self.is_match(properties, check)?)
    }

    /// Whether the expression matches in what it reads of `text`, checking `check` every few
    /// KiB of a long one (none: read to the end).
    pub fn is_match(&mut self, text: &[u8], check: Option<&Check>) -> Result<bool, Stopped> {
        let text = head(text);
        let regex = &self.expression.regex;
        let (Some(dfa), Some(cache), Some(check)) = (&self.expression.dfa, &mut self.cache, check) else {
            return Ok(regex.is_match(text));
        };
        if text.len() <= ONE_GO_BYTES {
            return Ok(regex.is_match(text));
        }
        match walk(dfa, cache, text, check)? {
            Some(found) => Ok(found),
            // The DFA quit (a Unicode word boundary beside a non-ASCII byte).
            None => Ok(regex.is_match(text)),
        }
    }
}

/// The lazy DFA over `text`, unanchored; `None` where it quit.
fn walk(dfa: &DFA, cache: &mut Cache, text: &[u8], check: &Check) -> Result<Option<bool>, Stopped> {
    let Ok(mut state) = dfa.start_state_forward(cache, &Input::new(text)) else { return Ok(None) };
    for piece in text.chunks(CHECK_EVERY_BYTES) {
        check.go_on()?;
        for &byte in piece {
            let Ok(next) = dfa.next_state(cache, state, byte) else { return Ok(None) };
            state = next;
            if state.is_tagged() {
                // A match state is entered one byte after the match ends.
                if state.is_match() {
                    return Ok(Some(true));
                }
                if state.is_dead() {
                    return Ok(Some(false));
                }
                if state.is_quit() {
                    return Ok(None);
                }
            }
        }
    }
    Ok(dfa.next_eoi_state(cache, state).ok().map(|end| end.is_match()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::budget::Budget;
    use std::time::{Duration, Instant};

    fn both(pattern: &str, text: &[u8]) -> (bool, bool) {
        let e = Expression::compile(pattern).unwrap();
        let budget = Budget::new(Duration::from_secs(60), &Default::default(), None);
        let check = budget.check();
        (e.searcher().is_match(text, None).unwrap(), e.searcher().is_match(text, Some(&check)).unwrap())
    }

    #[test]
    fn an_expression_is_bounded_in_size() {
        // The expression that matched at 26 KB/s under the old 1 MiB limit.
        let why = Expression::compile("(?:[a-zA-Z0-9 ][a-zA-Z0-9 ]?){1,2000}[^a-zA-Z0-9 ]").unwrap_err();
        assert!(why.contains("larger than 256 KiB") && why.contains("repeat less"), "{why}");
        for fits in [r"(?i)order-\d{6}", r"\w+@\w+\.com", r"\d{4}-\d{2}-\d{2}T", r"(?-u:\w){10}", r"SKU-\d\b"] {
            assert!(Expression::compile(fits).is_ok(), "{fits}");
        }
    }

    #[test]
    fn an_expression_reads_the_first_mib_of_a_text() {
        let e = Expression::compile("needle").unwrap();
        let mut payload = vec![b'.'; SCAN_BYTES - 6];
        payload.extend_from_slice(b"needle");
        assert!(e.searcher().in_record(&payload, b"{}", None).unwrap());
        payload.insert(0, b'.');
        assert!(!e.searcher().in_record(&payload, b"{}", None).unwrap(), "past the bytes an expression reads");
        assert!(e.searcher().in_record(&payload, br#"{"needle":1}"#, None).unwrap(), "properties are read apart");
    }

    #[test]
    fn the_lazy_dfa_answers_as_the_regex_crate_does() {
        let long = |tail: &str| {
            let mut text = "é ab, x ".repeat(2000).into_bytes();
            text.extend_from_slice(tail.as_bytes());
            text
        };
        for (pattern, tail, expected) in [
            (r"SKU-\d\b", "SKU-3 ", true),
            (r"SKU-\d\b", "SKU-33", false),
            (r"(?i)sku-3$", "SKU-3", true),
            (r"^é", "", true),
            (r"^ab", "", false),
            (r"(?-u)\xff\xfe", "", false),
            (r"\bé\b", "", true),
            (r"x\z", "x", true),
            (r"zz|ab,", "", true),
        ] {
            assert_eq!(both(pattern, &long(tail)), (expected, expected), "{pattern} on ...{tail:?}");
        }
        let mut binary = vec![b'a'; 10_000];
        binary.extend_from_slice(&[0xff, 0xfe]);
        assert_eq!(both(r"(?-u)\xff\xfe", &binary), (true, true));
    }

    #[test]
    fn a_slow_expression_over_a_long_text_stops_at_its_budget() {
        let e = Expression::compile("a[ab]{3000}c").unwrap();
        // a's and b's: every byte a new DFA state of ~1,500 NFA states.
        let mut x: u32 = 1;
        let text: Vec<u8> = (0..SCAN_BYTES)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                if x >> 16 & 1 == 0 {
                    b'a'
                } else {
                    b'b'
                }
            })
            .collect();
        let budget = Budget::new(Duration::from_millis(300), &Default::default(), None);
        let started = Instant::now();
        let answer = e.searcher().is_match(&text, Some(&budget.check()));
        assert_eq!(answer, Err(Stopped::TooSlow(Duration::from_millis(300))));
        assert!(started.elapsed() < Duration::from_secs(1), "stopped after {:?}", started.elapsed());
    }
}
