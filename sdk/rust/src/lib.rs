//! Write [tinybroker](../../README.md) plugins in Rust: the plugin ABI v1
//! ([docs/ABI.md](../../docs/ABI.md)) as plain functions, with no dependencies and no WASI.
//!
//! A plugin is a `cdylib` crate built for `wasm32-unknown-unknown`. It defines its hooks as
//! ordinary functions and exports them with the macros [`on_publish!`], [`on_ack!`],
//! [`on_redeliver!`], [`on_tick!`] and [`init!`]; this crate exports the version marker
//! `tinybroker_abi_v1` itself. A tenant filter:
//!
//! ```ignore
//! use tinybroker::{config, msg, Publish};
//!
//! fn filter() -> Publish {
//!     match (msg::header("tenant"), config::get("tenant")) {
//!         (Some(got), Some(want)) if got == want => Publish::Pass,
//!         _ => Publish::drop("wrong tenant"),
//!     }
//! }
//! tinybroker::on_publish!(filter);
//! ```
//!
//! Readers return owned values (`String` for topics, headers, ids and config values,
//! `Vec<u8>` for payloads). Without the feature `inbox` (`default-features = false`) they read
//! through a 1 KiB scratch buffer: a value that fits costs one host call, a longer one a
//! second. With it, the crate's default, the crate exports
//! `tb_v1_inbox` (docs/ABI.md, "The inbox"): the broker writes each call's message and event
//! into the plugin's memory before the call, and the readers take them from there, with no
//! host call; the setters of the payload and headers, and the reason, are listed there for the
//! broker to apply when the hook returns. It is the cheaper way even for a filter that reads
//! one header (BENCHMARKS.md). With `inbox`, [`on_publish!`] also
//! exports `tb_v1_on_publish_batch` (docs/ABI.md, "Batches"): the broker may then give the
//! messages of one publish frame in a single call, and the crate runs the plugin's on_publish
//! function on each in turn, exactly as in a `tb_v1_on_publish` call of its own (the readers read
//! that message, its writes and reason are its own, and host calls such as `set_topic`,
//! `emit`, `config::get` and `log` act on it); the plugin's code does not change. If the
//! function traps on one message (a panic, an `Err`), the whole batch fails and the broker
//! runs each of its messages again alone: the function may run twice for a message, so what
//! it does besides its verdict and changes (logs, counts kept in a `static`) should not
//! depend on running once. Either way, config values are read
//! once per instance and kept (an instance's configuration never changes). Writers
//! return `Result<(), Error>`. Changes to the message take effect when the hook returns; a
//! panic traps the call (after logging the panic's message at error level), and the plugin's
//! `failure_policy` decides the message's fate.
//!
//! Each instance of a plugin serves one call at a time, so the crate keeps its scratch buffer
//! in a `static`; it is not meant for threads (wasm32-unknown-unknown has none).

#![warn(missing_docs)]

use std::fmt;

mod inbox;
mod sys;

/// The version marker the broker looks for. It is never called.
#[no_mangle]
pub extern "C" fn tinybroker_abi_v1() {}

/// The size of the scratch buffer every reader tries first.
pub const SCRATCH_BYTES: usize = 1024;

static mut SCRATCH: [u8; SCRATCH_BYTES] = [0; SCRATCH_BYTES];

/// Reads a value with the ABI's convention: try the scratch buffer, and if the value is
/// longer, read it again into a buffer of its size. None if the host says absent (-1).
fn read(f: impl Fn(*mut u8, usize) -> i32) -> Option<Vec<u8>> {
    // SAFETY: an instance runs one call at a time on one thread, and no reference to
    // SCRATCH outlives this function.
    let scratch = unsafe { &mut *std::ptr::addr_of_mut!(SCRATCH) };
    let n = f(scratch.as_mut_ptr(), scratch.len());
    if n < 0 {
        return None;
    }
    let n = n as usize;
    if n <= scratch.len() {
        return Some(scratch[..n].to_vec());
    }
    let mut v = Vec::with_capacity(n);
    let got = f(v.as_mut_ptr(), n);
    // The value cannot change within a call, but never trust a length blindly.
    let got = (got.max(0) as usize).min(n);
    // SAFETY: the host wrote min(len, n) = got bytes at v's start.
    unsafe { v.set_len(got) };
    Some(v)
}

/// Reads a value and compares it with `want` without allocating when it fits the scratch
/// buffer.
fn read_eq(f: impl Fn(*mut u8, usize) -> i32, want: &[u8]) -> bool {
    let scratch = unsafe { &mut *std::ptr::addr_of_mut!(SCRATCH) };
    let n = f(scratch.as_mut_ptr(), scratch.len());
    if n < 0 || n as usize != want.len() {
        return false;
    }
    if want.len() <= scratch.len() {
        return &scratch[..want.len()] == want;
    }
    read(f).map_or(false, |v| v == want)
}

fn string(v: Vec<u8>) -> String {
    String::from_utf8(v).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn ptr(s: &[u8]) -> (*const u8, usize) {
    (s.as_ptr(), s.len())
}

/// Why the broker refused a write or an emit: the ABI's status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// `ERR_INVALID` (-1): a topic that is not a valid topic, an empty header name, a header
    /// name or value that is not UTF-8.
    Invalid,
    /// `ERR_TOO_LARGE` (-2): over `max_message_bytes` or `max_header_bytes`.
    TooLarge,
    /// `ERR_NOT_ALLOWED` (-3): not in this hook (e.g. changing the payload in on_redeliver).
    NotAllowed,
    /// `ERR_LIMIT` (-4): the plugin's `max_emits` for this call is used up, or its key-value
    /// store is full (`kv_max_bytes`).
    Limit,
    /// `ERR_CONFLICT` (-5): a compare-and-set ([`kv::cas`]) found another value than the old one.
    Conflict,
    /// A status this version of the crate does not know.
    Other(i32),
}

impl Error {
    fn check(status: i32) -> Result<i32, Error> {
        match status {
            s if s >= 0 => Ok(s),
            -1 => Err(Error::Invalid),
            -2 => Err(Error::TooLarge),
            -3 => Err(Error::NotAllowed),
            -4 => Err(Error::Limit),
            -5 => Err(Error::Conflict),
            s => Err(Error::Other(s)),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid => f.write_str("tinybroker: invalid value (a bad topic or an empty header name)"),
            Error::TooLarge => f.write_str("tinybroker: over the broker's max_message_bytes or max_header_bytes"),
            Error::NotAllowed => f.write_str("tinybroker: not allowed in this hook"),
            Error::Limit => f.write_str("tinybroker: max_emits for this call used up, or the plugin's store is full"),
            Error::Conflict => f.write_str("tinybroker: compare-and-set: the value changed"),
            Error::Other(s) => write!(f, "tinybroker: unknown status {}", s),
        }
    }
}

impl std::error::Error for Error {}

/// The message of the hook, as it entered the call: changes made with the setters are seen
/// by the next plugin, not by these readers.
pub mod msg {
    use super::*;

    /// The topic.
    pub fn topic() -> String {
        if inbox::active() {
            return string(inbox::field(inbox::TOPIC).unwrap_or_default().to_vec());
        }
        string(read(|b, c| unsafe { sys::msg_topic(b, c) }).unwrap_or_default())
    }

    /// The payload.
    pub fn payload() -> Vec<u8> {
        if inbox::active() {
            return inbox::field(inbox::PAYLOAD).unwrap_or_default().to_vec();
        }
        read(|b, c| unsafe { sys::msg_payload(b, c) }).unwrap_or_default()
    }

    /// One header's value, or None if it is not set.
    pub fn header(name: &str) -> Option<String> {
        if inbox::active() {
            return inbox::header(name.as_bytes()).map(|v| string(v.to_vec()));
        }
        let (k, kl) = ptr(name.as_bytes());
        read(|b, c| unsafe { sys::msg_header(k, kl, b, c) }).map(string)
    }

    /// Whether header `name` is set to exactly `value`; allocates nothing for values up to
    /// [`SCRATCH_BYTES`].
    pub fn header_is(name: &str, value: &str) -> bool {
        if inbox::active() {
            return inbox::header_is(name.as_bytes(), value.as_bytes());
        }
        let (k, kl) = ptr(name.as_bytes());
        read_eq(|b, c| unsafe { sys::msg_header(k, kl, b, c) }, value.as_bytes())
    }

    /// Whether the topic is exactly `topic`; allocates nothing.
    pub fn topic_is(topic: &str) -> bool {
        if inbox::active() {
            return inbox::field(inbox::TOPIC).map_or(false, |t| inbox::same(t, topic.as_bytes()));
        }
        read_eq(|b, c| unsafe { sys::msg_topic(b, c) }, topic.as_bytes())
    }

    /// Every header as (name, value), sorted by name as the host enumerates them.
    pub fn headers() -> Vec<(String, String)> {
        if inbox::active() {
            return (0..inbox::header_count())
                .filter_map(inbox::header_at)
                .map(|(k, v)| (string(k.to_vec()), string(v.to_vec())))
                .collect();
        }
        let n = unsafe { sys::msg_header_count() }.max(0);
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n {
            if let Some(name) = read(|b, c| unsafe { sys::msg_header_name(i, b, c) }).map(string) {
                let value = header(&name).unwrap_or_default();
                out.push((name, value));
            }
        }
        out
    }

    /// The message's system_id in on_ack and on_redeliver; None in on_publish (no id is
    /// assigned yet).
    pub fn id() -> Option<String> {
        if inbox::active() {
            return inbox::field(inbox::ID).map(|v| string(v.to_vec())).filter(|s| !s.is_empty());
        }
        read(|b, c| unsafe { sys::msg_id(b, c) }).map(string).filter(|s| !s.is_empty())
    }

    /// The message's ordering key, empty if it has none. Not in the inbox: always a host call.
    pub fn key() -> String {
        string(read(|b, c| unsafe { sys::msg_key(b, c) }).unwrap_or_default())
    }

    /// Sets the message's ordering key, or removes it with "" (on_publish). A key over
    /// 256 bytes (`consts::MAX_KEY_BYTES`) is [`Error::TooLarge`], one with a control
    /// character [`Error::Invalid`]; the key is then unchanged.
    pub fn set_key(key: &str) -> Result<(), Error> {
        let (p, l) = ptr(key.as_bytes());
        Error::check(unsafe { sys::msg_set_key(p, l) }).map(|_| ())
    }

    /// Routes the message to `topic` instead (on_publish).
    pub fn set_topic(topic: &str) -> Result<(), Error> {
        let (p, l) = ptr(topic.as_bytes());
        Error::check(unsafe { sys::msg_set_topic(p, l) }).map(|_| ())
    }

    /// Replaces the payload (on_publish).
    pub fn set_payload(payload: &[u8]) -> Result<(), Error> {
        if inbox::active() {
            return Error::check(inbox::set_payload(payload)).map(|_| ());
        }
        let (p, l) = ptr(payload);
        Error::check(unsafe { sys::msg_set_payload(p, l) }).map(|_| ())
    }

    /// Adds or replaces a header (on_publish, on_redeliver).
    pub fn set_header(name: &str, value: &str) -> Result<(), Error> {
        if inbox::active() {
            return Error::check(inbox::set_header(name.as_bytes(), value.as_bytes())).map(|_| ());
        }
        let (k, kl) = ptr(name.as_bytes());
        let (v, vl) = ptr(value.as_bytes());
        Error::check(unsafe { sys::msg_set_header(k, kl, v, vl) }).map(|_| ())
    }

    /// Removes a header; Ok if it was not set (on_publish, on_redeliver).
    pub fn del_header(name: &str) -> Result<(), Error> {
        if inbox::active() {
            return Error::check(inbox::del_header(name.as_bytes())).map(|_| ());
        }
        let (k, kl) = ptr(name.as_bytes());
        Error::check(unsafe { sys::msg_del_header(k, kl) }).map(|_| ())
    }
}

/// The delivery that on_ack and on_redeliver are about.
pub mod event {
    use super::*;

    /// The consumer group's subscription_id.
    pub fn subscription() -> String {
        if inbox::active() {
            return string(inbox::field(inbox::SUB).unwrap_or_default().to_vec());
        }
        string(read(|b, c| unsafe { sys::event_subscription(b, c) }).unwrap_or_default())
    }

    /// The consumer group's name.
    pub fn group() -> String {
        if inbox::active() {
            return string(inbox::field(inbox::GROUP).unwrap_or_default().to_vec());
        }
        string(read(|b, c| unsafe { sys::event_group(b, c) }).unwrap_or_default())
    }

    /// The delivery attempt that was acked, or that failed (1 = first).
    pub fn attempt() -> u32 {
        if inbox::active() {
            return inbox::attempt();
        }
        unsafe { sys::event_attempt() }.max(0) as u32
    }

    /// How long the acked delivery was in flight (on_ack).
    pub fn in_flight() -> std::time::Duration {
        if inbox::active() {
            return std::time::Duration::from_nanos(inbox::in_flight_ns().min(i64::MAX as u64));
        }
        std::time::Duration::from_nanos(unsafe { sys::event_in_flight_ns() }.max(0) as u64)
    }

    /// Why the message is being redelivered (on_redeliver): `nack` or the nack's own reason,
    /// `ack deadline exceeded`, `member left`.
    pub fn reason() -> String {
        if inbox::active() {
            return string(inbox::field(inbox::REASON).unwrap_or_default().to_vec());
        }
        string(read(|b, c| unsafe { sys::event_reason(b, c) }).unwrap_or_default())
    }
}

/// The plugin's key-value store (docs/ABI.md, "State"): shared by every instance of the
/// plugin, where a `static` is the instance's own. Each function is a host call, in any hook,
/// and a write takes effect at once, whatever the hook then returns. `ttl_ms` 0: never expires.
pub mod kv {
    use super::*;

    /// The value of `key`, or None if it is absent or expired.
    pub fn get(key: &str) -> Option<Vec<u8>> {
        let (k, kl) = ptr(key.as_bytes());
        // Unlike the message's values, a stored value may change between two reads (another
        // instance writes it): read until it fits.
        let mut v: Vec<u8> = Vec::with_capacity(256);
        loop {
            let n = unsafe { sys::kv_get(k, kl, v.as_mut_ptr(), v.capacity()) };
            if n < 0 {
                return None;
            }
            let n = n as usize;
            if n <= v.capacity() {
                // SAFETY: the host wrote n bytes at v's start.
                unsafe { v.set_len(n) };
                return Some(v);
            }
            v = Vec::with_capacity(n);
        }
    }

    /// Sets `key` to `value`. [`Error::Invalid`]: an empty key or a negative ttl;
    /// [`Error::TooLarge`]: a key over 256 bytes or a value over `kv_max_value_bytes`;
    /// [`Error::Limit`]: the store would pass `kv_max_bytes`.
    pub fn set(key: &str, value: &[u8], ttl_ms: i64) -> Result<(), Error> {
        let ((k, kl), (v, vl)) = (ptr(key.as_bytes()), ptr(value));
        Error::check(unsafe { sys::kv_set(k, kl, v, vl, ttl_ms) }).map(|_| ())
    }

    /// Compare-and-set: sets `key` to `value`, as [`set`] does, only if its value is `old`
    /// now (an empty `old`: if it is absent); else [`Error::Conflict`], and nothing changed:
    /// read it again and retry.
    pub fn cas(key: &str, old: &[u8], value: &[u8], ttl_ms: i64) -> Result<(), Error> {
        let ((k, kl), (o, ol), (v, vl)) = (ptr(key.as_bytes()), ptr(old), ptr(value));
        Error::check(unsafe { sys::kv_cas(k, kl, o, ol, v, vl, ttl_ms) }).map(|_| ())
    }

    /// Removes `key`; a key that is absent is not an error.
    pub fn delete(key: &str) -> Result<(), Error> {
        let (k, kl) = ptr(key.as_bytes());
        Error::check(unsafe { sys::kv_delete(k, kl) }).map(|_| ())
    }
}

/// The plugin's `config` block.
pub mod config {
    use super::*;

    /// Values read so far, kept: an instance's configuration never changes, and a filter
    /// that compares a header with one would otherwise pay a host call per message.
    static mut CACHE: Vec<(String, Option<String>)> = Vec::new();

    /// One value by key, or None if the key is not set.
    pub fn get(key: &str) -> Option<String> {
        // SAFETY: one thread, and no reference to CACHE outlives this function.
        let cache = unsafe { &mut *std::ptr::addr_of_mut!(CACHE) };
        if let Some((_, v)) = cache.iter().find(|(k, _)| k == key) {
            return v.clone();
        }
        let (k, kl) = ptr(key.as_bytes());
        let v = read(|b, c| unsafe { sys::config_get(k, kl, b, c) }).map(string);
        if cache.len() < 16 {
            cache.push((key.to_string(), v.clone()));
        }
        v
    }

    /// The whole configuration as the ABI gives it: `key=value\n` lines sorted by key, with
    /// `\`, newline and carriage return escaped. [`all`] decodes it.
    pub fn text() -> String {
        string(read(|b, c| unsafe { sys::config(b, c) }).unwrap_or_default())
    }

    /// The whole configuration as (key, value) pairs sorted by key, unescaped.
    pub fn all() -> Vec<(String, String)> {
        parse(&text())
    }

    /// Decodes the text of [`text`].
    pub fn parse(text: &str) -> Vec<(String, String)> {
        text.split('\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap_or((l, ""));
                (unescape(k), unescape(v))
            })
            .collect()
    }

    fn unescape(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('r') => out.push('\r'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            }
        }
        out
    }
}

/// The broker's log levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(i32)]
pub enum Level {
    /// 0
    Trace = 0,
    /// 1
    Debug = 1,
    /// 2
    Info = 2,
    /// 3
    Warn = 3,
    /// 4
    Error = 4,
}

/// Logs a line through the broker's logger, tagged with the plugin's name.
pub fn log(level: Level, line: &str) {
    let (p, l) = ptr(line.as_bytes());
    unsafe { sys::log(level as i32, p, l) }
}

/// Logs at info level.
pub fn info(line: &str) {
    log(Level::Info, line)
}

/// Logs at warn level.
pub fn warn(line: &str) {
    log(Level::Warn, line)
}

/// Logs at error level.
pub fn error(line: &str) {
    log(Level::Error, line)
}

/// Wall-clock time, nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    unsafe { sys::now() }
}

/// Sets the reason for this call's verdict (why a message is dropped, rejected or
/// dead-lettered, or why init refused the configuration). The last call wins. The
/// constructors [`Publish::drop`], [`Publish::reject`] and [`Redeliver::dead_letter`] call it.
pub fn set_reason(reason: &str) {
    if inbox::active() {
        return inbox::set_reason(reason.as_bytes());
    }
    let (p, l) = ptr(reason.as_bytes());
    unsafe { sys::set_reason(p, l) }
}

/// Metrics the plugin defines, exported on the broker's `/metrics` as
/// `tinybroker_plugin_<plugin>_<name>` (docs/ABI.md, "Metrics"). Define them in init: every
/// instance runs it, and defining a name again with the same kind, help, label and buckets
/// returns the same metric, shared by the instances and kept across a reload. Values are
/// `i64`: choose a unit that makes them integers (microseconds, bytes).
pub mod metric {
    use super::*;

    /// A metric: its id.
    #[derive(Debug, Clone, Copy)]
    pub struct Metric(i32);

    fn define(kind: i32, name: &str, help: &str, label: &str, buckets: &str) -> Result<Metric, Error> {
        let (n, nl) = ptr(name.as_bytes());
        let (h, hl) = ptr(help.as_bytes());
        let (l, ll) = ptr(label.as_bytes());
        let (b, bl) = ptr(buckets.as_bytes());
        Error::check(unsafe { sys::metric_define(kind, n, nl, h, hl, l, ll, b, bl) }).map(Metric)
    }

    /// Defines a counter; `label` names its one label, or is `""` for none.
    pub fn counter(name: &str, help: &str, label: &str) -> Result<Metric, Error> {
        define(sys::consts::METRIC_COUNTER, name, help, label, "")
    }

    /// Defines a gauge.
    pub fn gauge(name: &str, help: &str, label: &str) -> Result<Metric, Error> {
        define(sys::consts::METRIC_GAUGE, name, help, label, "")
    }

    /// Defines a histogram with these increasing bucket bounds (none: the default, 1, 2, 5,
    /// 10 ... 1,000,000).
    pub fn histogram(name: &str, help: &str, label: &str, buckets: &[i64]) -> Result<Metric, Error> {
        let text: Vec<String> = buckets.iter().map(|b| b.to_string()).collect();
        define(sys::consts::METRIC_HISTOGRAM, name, help, label, &text.join(","))
    }

    impl Metric {
        /// Adds `v` to a counter (`v >= 0`) or a gauge, in the series of `label_value` (`""`
        /// for a metric without a label). Past 100 label values it is counted under
        /// `"_other"`, and the result is [`Error::Limit`].
        pub fn add(self, v: i64, label_value: &str) -> Result<(), Error> {
            let (p, l) = ptr(label_value.as_bytes());
            Error::check(unsafe { sys::metric_add(self.0, v, p, l) }).map(|_| ())
        }

        /// Sets a gauge, as [`Metric::add`] adds.
        pub fn set(self, v: i64, label_value: &str) -> Result<(), Error> {
            let (p, l) = ptr(label_value.as_bytes());
            Error::check(unsafe { sys::metric_set(self.0, v, p, l) }).map(|_| ())
        }

        /// Records `v` in a histogram, as [`Metric::add`] adds.
        pub fn observe(self, v: i64, label_value: &str) -> Result<(), Error> {
            let (p, l) = ptr(label_value.as_bytes());
            Error::check(unsafe { sys::metric_observe(self.0, v, p, l) }).map(|_| ())
        }
    }
}

/// A message emitted by [`emit`], whose headers can still be set.
#[derive(Debug, Clone, Copy)]
pub struct Emitted(i32);

impl Emitted {
    /// Sets a header of the emitted message. If the broker refuses it, the message still goes
    /// out without it.
    pub fn header(self, name: &str, value: &str) -> Result<Self, Error> {
        let (k, kl) = ptr(name.as_bytes());
        let (v, vl) = ptr(value.as_bytes());
        Error::check(unsafe { sys::emit_header(self.0, k, kl, v, vl) }).map(|_| self)
    }

    /// Sets the ordering key of the emitted message, checked as [`msg::set_key`]'s. If the
    /// broker refuses it, the message still goes out without it.
    pub fn key(self, key: &str) -> Result<Self, Error> {
        let (p, l) = ptr(key.as_bytes());
        Error::check(unsafe { sys::emit_key(self.0, p, l) }).map(|_| self)
    }
}

/// Emits a new message, published when the hook returns successfully (whatever its
/// verdict), after the message itself. Set its headers with [`Emitted::header`], or use
/// [`emit_with`].
pub fn emit(topic: &str, payload: &[u8]) -> Result<Emitted, Error> {
    let (t, tl) = ptr(topic.as_bytes());
    let (p, pl) = ptr(payload);
    Error::check(unsafe { sys::emit(t, tl, p, pl) }).map(Emitted)
}

/// Emits a message with headers. Empty header names are refused before anything is emitted,
/// so a message never goes out without the headers it was meant to have for that reason.
pub fn emit_with(topic: &str, payload: &[u8], headers: &[(&str, &str)]) -> Result<(), Error> {
    if headers.iter().any(|(k, _)| k.is_empty()) {
        return Err(Error::Invalid);
    }
    let mut e = emit(topic, payload)?;
    for (k, v) in headers {
        e = e.header(k, v)?;
    }
    Ok(())
}

/// gRPC status codes for [`Publish::reject`].
pub mod code {
    /// 3: the default of a rejection.
    pub const INVALID_ARGUMENT: u32 = 3;
    /// 5
    pub const NOT_FOUND: u32 = 5;
    /// 7
    pub const PERMISSION_DENIED: u32 = 7;
    /// 8
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    /// 9
    pub const FAILED_PRECONDITION: u32 = 9;
    /// 14
    pub const UNAVAILABLE: u32 = 14;
    /// 16
    pub const UNAUTHENTICATED: u32 = 16;
}

fn verdict(action: u32, arg: u32) -> i64 {
    (action as i64) | ((arg as i64) << 32)
}

/// The verdict of on_publish.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// Continue with the message as changed by this call.
    Pass,
    /// Drop the message (the publisher sees success, routed to no one). Set a reason with
    /// [`Publish::drop`].
    Drop,
    /// Refuse the publish with this gRPC status code (1–16; 0 means INVALID_ARGUMENT).
    /// Set a reason with [`Publish::reject`].
    Reject(u32),
}

impl Publish {
    /// Drops the message, saying why.
    pub fn drop(reason: &str) -> Publish {
        set_reason(reason);
        Publish::Drop
    }

    /// Refuses the publish with gRPC status `code` (see [`code`]) and the reason the
    /// publisher will see.
    pub fn reject(code: u32, reason: &str) -> Publish {
        set_reason(reason);
        Publish::Reject(code)
    }

    /// The ABI's packed verdict. A code over 16 is sent as is, and the broker counts it as a
    /// failure of the plugin (a malformed verdict).
    pub fn to_raw(self) -> i64 {
        match self {
            Publish::Pass => verdict(0, 0),
            Publish::Drop => verdict(1, 0),
            Publish::Reject(code) => verdict(2, code),
        }
    }
}

/// The verdict of on_redeliver.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redeliver {
    /// The broker's default: redeliver (after a nack's delay), or dead-letter past the
    /// group's max_deliveries.
    Default,
    /// Redeliver after this many milliseconds (1 to 2^31-1; 0 is sent as 1, more as the
    /// maximum); the group's max_deliveries does not apply.
    DelayMs(u32),
    /// Send to the group's dead-letter topic now. Set a reason with
    /// [`Redeliver::dead_letter`].
    DeadLetter,
    /// Forget the message.
    Drop,
}

impl Redeliver {
    /// Redeliver after `d` (rounded down to milliseconds, at least 1 ms).
    pub fn delay(d: std::time::Duration) -> Redeliver {
        Redeliver::DelayMs(d.as_millis().min(u32::MAX as u128) as u32)
    }

    /// Dead-letter now, saying why.
    pub fn dead_letter(reason: &str) -> Redeliver {
        set_reason(reason);
        Redeliver::DeadLetter
    }

    /// The ABI's packed verdict.
    pub fn to_raw(self) -> i64 {
        match self {
            Redeliver::Default => verdict(0, 0),
            Redeliver::DelayMs(ms) => verdict(1, ms.clamp(1, i32::MAX as u32)),
            Redeliver::DeadLetter => verdict(2, 0),
            Redeliver::Drop => verdict(3, 0),
        }
    }
}

/// What a hook function may return: its verdict, or a `Result` of it, so that a hook can use
/// `?` on the SDK's writers. An `Err` is logged at error level (`plugin failed: <error>`) and
/// traps the call, as a panic does: the plugin's `failure_policy` decides the message's fate.
pub trait HookResult<V> {
    /// The verdict, or the trap.
    fn into_verdict(self) -> V;
}

macro_rules! hook_results {
    ($($v:ty),*) => {$(
        impl HookResult<$v> for $v {
            fn into_verdict(self) -> $v {
                self
            }
        }
        impl<E: fmt::Display> HookResult<$v> for Result<$v, E> {
            fn into_verdict(self) -> $v {
                self.unwrap_or_else(|e| fail(&e))
            }
        }
    )*};
}

hook_results!(Publish, Redeliver, ());

fn fail(e: &dyn fmt::Display) -> ! {
    error(&format!("plugin failed: {}", e));
    std::process::abort()
}

#[doc(hidden)]
pub mod __private {
    /// Called first in every hook: makes a panic log its message at error level before the
    /// call traps. With an inbox, `tb_v1_inbox` did so before the instance's first call, and
    /// this costs nothing more than the test whether there is one, which the readers make
    /// anyway (the compiler makes it once). The write list needs nothing: a call's first write
    /// starts its list, and each write gives it to the broker (see inbox.rs).
    #[inline(always)]
    pub fn enter() {
        if !crate::inbox::active() {
            hook_panics();
        }
    }

    /// Installs the panic hook, once per instance.
    pub(crate) fn hook_panics() {
        static mut HOOKED: bool = false;
        // SAFETY: one thread.
        unsafe {
            if HOOKED {
                return;
            }
            HOOKED = true;
        }
        std::panic::set_hook(Box::new(|info| {
            crate::log(crate::Level::Error, &format!("plugin panicked: {}", info));
        }));
    }

    /// A hook's verdict, as the ABI's packed result.
    pub trait Verdict {
        fn raw(self) -> i64;
    }

    impl Verdict for crate::Publish {
        fn raw(self) -> i64 {
            self.to_raw()
        }
    }

    impl Verdict for crate::Redeliver {
        fn raw(self) -> i64 {
            self.to_raw()
        }
    }

    impl Verdict for () {
        fn raw(self) -> i64 {
            0
        }
    }

    /// The body of every hook's export (see `__export_hook!`): runs `f` and returns its
    /// verdict, a `V`, packed.
    #[inline(always)]
    pub fn hook<V: Verdict, R: crate::HookResult<V>, F: FnOnce() -> R>(f: F) -> i64 {
        enter();
        run::<V, R, F>(f)
    }

    /// Runs `f` and returns its verdict, packed.
    #[inline(always)]
    pub fn run<V: Verdict, R: crate::HookResult<V>, F: FnOnce() -> R>(f: F) -> i64 {
        f().into_verdict().raw()
    }

    /// The body of `tb_v1_on_publish_batch` (see `__export_batch!`): `on_publish` runs once
    /// per message of the batch, each time as in its own `tb_v1_on_publish` call.
    #[cfg(feature = "inbox")]
    pub fn publish_batch<F: FnMut() -> i64>(on_publish: F) -> i32 {
        crate::inbox::batch(on_publish) // tb_v1_inbox installed the panic hook
    }

    pub fn init_result(r: Result<(), String>) -> i32 {
        let status = match r {
            Ok(()) => 0,
            Err(reason) => {
                crate::set_reason(&reason);
                1
            }
        };
        status
    }
}

/// Exports `fn() -> Publish` (or `-> Result<Publish, E>`, see [`HookResult`]) as the
/// plugin's `tb_v1_on_publish` hook. With the feature `inbox`, it also exports
/// `tb_v1_on_publish_batch`, which runs the same function on each message of a batch (see
/// the crate's documentation).
#[macro_export]
macro_rules! on_publish {
    ($f:path) => {
        $crate::__export_hook!(tb_v1_on_publish, $crate::Publish, $f);
        $crate::__export_batch!(tb_v1_on_publish);
    };
}

/// What `on_publish!` adds with the feature `inbox`: the export `tb_v1_on_publish_batch`,
/// which runs `$hook`, the export `tb_v1_on_publish`, on each message of a batch. Calling the
/// export rather than the plugin's function leaves that function one caller, into which the
/// compiler inlines it: a message published alone then costs one call into the plugin, not
/// two (each call between WebAssembly functions costs a prologue in the broker's runtime).
#[cfg(feature = "inbox")]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_batch {
    ($hook:ident) => {
        #[no_mangle]
        pub extern "C" fn tb_v1_on_publish_batch() -> i32 {
            $crate::__private::publish_batch(|| $hook())
        }
    };
}

/// Without the feature `inbox`, `on_publish!` exports `tb_v1_on_publish` alone.
#[cfg(not(feature = "inbox"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_batch {
    ($hook:ident) => {};
}

/// Exports `fn()` (or `-> Result<(), E>`) as the plugin's `tb_v1_on_ack` hook.
#[macro_export]
macro_rules! on_ack {
    ($f:path) => {
        $crate::__export_hook!(tb_v1_on_ack, (), $f);
    };
}

/// Exports `fn() -> Redeliver` (or `-> Result<Redeliver, E>`) as the plugin's
/// `tb_v1_on_redeliver` hook.
#[macro_export]
macro_rules! on_redeliver {
    ($f:path) => {
        $crate::__export_hook!(tb_v1_on_redeliver, $crate::Redeliver, $f);
    };
}

/// Exports `fn()` (or `-> Result<(), E>`) as the plugin's `tb_v1_on_tick` hook, which the
/// broker calls every `tick_interval` of the plugin's block, with no message: it may emit
/// ([`emit`]), use the store ([`kv`]) and metrics, and log. Every broker node ticks; for work
/// done once per cluster, take a lease with [`kv::cas`] and a TTL (docs/ABI.md, "Ticks").
#[macro_export]
macro_rules! on_tick {
    ($f:path) => {
        $crate::__export_hook!(tb_v1_on_tick, (), $f);
    };
}

/// What the hook macros expand to: the export `$name` of the hook `$f`, whose verdict is a
/// `$v`.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_hook {
    ($name:ident, $v:ty, $f:path) => {
        #[no_mangle]
        pub extern "C" fn $name() -> i64 {
            $crate::__private::hook::<$v, _, _>($f)
        }
    };
}

/// Exports `fn() -> Result<(), String>` as the plugin's `tb_v1_init`, run once per instance
/// before any hook: `Err(reason)` refuses the load with that reason.
#[macro_export]
macro_rules! init {
    ($f:path) => {
        #[no_mangle]
        pub extern "C" fn tb_v1_init() -> i32 {
            $crate::__private::enter();
            $crate::__private::init_result($f())
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_pack_action_and_argument() {
        assert_eq!(Publish::Pass.to_raw(), 0);
        assert_eq!(Publish::Drop.to_raw(), 1);
        assert_eq!(Publish::Reject(7).to_raw(), 2 | 7 << 32);
        assert_eq!(Redeliver::DelayMs(50).to_raw(), 1 | 50 << 32);
        assert_eq!(Redeliver::DelayMs(0).to_raw(), 1 | 1 << 32);
        assert_eq!(Redeliver::DelayMs(u32::MAX).to_raw(), 1 | (i32::MAX as i64) << 32);
        assert_eq!(Redeliver::DeadLetter.to_raw(), 2);
        assert_eq!(Redeliver::Drop.to_raw(), 3);
    }

    #[test]
    fn config_text_is_unescaped() {
        let got = config::parse("a=1\nb=x\\ny\\\\z\\r\nempty=\n");
        let want = [("a", "1"), ("b", "x\ny\\z\r"), ("empty", "")];
        assert_eq!(got.len(), want.len());
        for ((k, v), (wk, wv)) in got.iter().zip(want.iter()) {
            assert_eq!((k.as_str(), v.as_str()), (*wk, *wv));
        }
    }

    #[test]
    fn errors_map_statuses() {
        assert_eq!(Error::check(3), Ok(3));
        assert_eq!(Error::check(-1), Err(Error::Invalid));
        assert_eq!(Error::check(-4), Err(Error::Limit));
        assert_eq!(Error::check(-9), Err(Error::Other(-9)));
    }
}
