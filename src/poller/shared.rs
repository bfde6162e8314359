//! Argument maps, effective policies and short names shared between queues and polls.
//!
//! A broker's queues mostly carry one of a few argument maps (`x-queue-type`, a dead-letter
//! exchange) and effective policies (one policy applies to many queues). Parsed per queue and per
//! poll they were, at 50,000 queues, tens of MB held twice (the live views and the next poll's):
//! each distinct map is now kept once, and every view holding it points to it. Vhost names,
//! queue types and states are shared the same way.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::{Map, Value};

pub type SharedMap = Arc<Map<String, Value>>;

#[derive(Default)]
pub struct SharedMaps {
    /// Distinct maps by a hash of their contents; equal hashes are told apart by comparing.
    by_hash: HashMap<u64, Vec<SharedMap>>,
    /// Vhost names, queue types and states: a handful of distinct strings for every view.
    strs: HashSet<Arc<str>>,
}

impl SharedMaps {
    /// The shared copy of `map`'s contents (`map` itself when it is the first).
    pub fn share(&mut self, map: SharedMap) -> SharedMap {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        hash_map(&map, &mut hasher);
        let same = self.by_hash.entry(hasher.finish()).or_default();
        if let Some(existing) = same.iter().find(|m| **m == map) {
            return existing.clone();
        }
        same.push(map.clone());
        map
    }

    /// `map`, or the shared empty map.
    pub fn share_or_empty(&mut self, map: Option<SharedMap>) -> SharedMap {
        self.share(map.unwrap_or_default())
    }

    /// The shared copy of `s`.
    pub fn share_str(&mut self, s: &str) -> Arc<str> {
        if let Some(shared) = self.strs.get(s) {
            return shared.clone();
        }
        let shared: Arc<str> = s.into();
        self.strs.insert(shared.clone());
        shared
    }

    /// Forgets the maps and strings nothing else holds any more (queues deleted or changed).
    pub fn prune(&mut self) {
        self.strs.retain(|s| Arc::strong_count(s) > 1);
        self.by_hash.retain(|_, maps| {
            maps.retain(|m| Arc::strong_count(m) > 1);
            !maps.is_empty()
        });
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_hash.values().map(Vec::len).sum()
    }
}

pub(super) fn hash_map(map: &Map<String, Value>, h: &mut impl Hasher) {
    map.len().hash(h);
    for (key, value) in map {
        key.hash(h);
        hash_value(value, h);
    }
}

fn hash_value(value: &Value, h: &mut impl Hasher) {
    std::mem::discriminant(value).hash(h);
    match value {
        Value::Null => {}
        Value::Bool(b) => b.hash(h),
        // Equal numbers compare equal in the same representation; the bits of that are enough.
        Value::Number(n) => {
            n.as_i64().hash(h);
            n.as_u64().hash(h);
            n.as_f64().map(f64::to_bits).hash(h);
        }
        Value::String(s) => s.hash(h),
        Value::Array(items) => {
            items.len().hash(h);
            items.iter().for_each(|v| hash_value(v, h));
        }
        Value::Object(map) => hash_map(map, h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(json: &str) -> SharedMap {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn equal_maps_are_one_and_unheld_ones_are_forgotten() {
        let mut maps = SharedMaps::default();
        let a = maps.share(map(r#"{"x-queue-type":"quorum","x-max-length":10}"#));
        let b = maps.share(map(r#"{"x-max-length":10,"x-queue-type":"quorum"}"#));
        assert!(Arc::ptr_eq(&a, &b));
        let c = maps.share(map(r#"{"x-max-length":11,"x-queue-type":"quorum"}"#));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(*c, *map(r#"{"x-max-length":11,"x-queue-type":"quorum"}"#), "contents kept");
        let empty = maps.share_or_empty(None);
        assert!(Arc::ptr_eq(&empty, &maps.share(map("{}"))));
        assert_eq!(maps.len(), 3);
        drop((a, b, empty));
        maps.prune();
        assert_eq!(maps.len(), 1, "only the map still held is kept");
        assert!(Arc::ptr_eq(&c, &maps.share(map(r#"{"x-queue-type":"quorum","x-max-length":11}"#))));
    }
}
