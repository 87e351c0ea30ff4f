//! The host functions of module `tinybroker` (docs/ABI.md). Pointers and lengths are i32 on
//! wasm32, which is what `*const u8` and `usize` are there.

macro_rules! imports {
    ($(fn $name:ident = $link:literal ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
        #[cfg(target_arch = "wasm32")]
        #[link(wasm_import_module = "tinybroker")]
        extern "C" {
            $(#[link_name = $link] pub fn $name($($arg: $ty),*) $(-> $ret)?;)*
        }

        // Off wasm (the crate's own unit tests) there is no host: calling one is a bug.
        $(
            #[cfg(not(target_arch = "wasm32"))]
            #[allow(unused_variables)]
            pub unsafe fn $name($($arg: $ty),*) $(-> $ret)? {
                panic!(concat!("tinybroker: ", $link, " needs the broker's plugin host (build for wasm32)"))
            }
        )*
    };
}

imports! {
    fn log = "v1_log" (level: i32, ptr: *const u8, len: usize);
    fn now = "v1_now" () -> i64;
    fn config = "v1_config" (buf: *mut u8, cap: usize) -> i32;
    fn config_get = "v1_config_get" (key: *const u8, key_len: usize, buf: *mut u8, cap: usize) -> i32;
    fn set_reason = "v1_set_reason" (ptr: *const u8, len: usize);
    fn msg_topic = "v1_msg_topic" (buf: *mut u8, cap: usize) -> i32;
    fn msg_payload = "v1_msg_payload" (buf: *mut u8, cap: usize) -> i32;
    fn msg_header = "v1_msg_header" (key: *const u8, key_len: usize, buf: *mut u8, cap: usize) -> i32;
    fn msg_header_count = "v1_msg_header_count" () -> i32;
    fn msg_header_name = "v1_msg_header_name" (index: i32, buf: *mut u8, cap: usize) -> i32;
    fn msg_id = "v1_msg_id" (buf: *mut u8, cap: usize) -> i32;
    fn msg_set_topic = "v1_msg_set_topic" (ptr: *const u8, len: usize) -> i32;
    fn msg_set_payload = "v1_msg_set_payload" (ptr: *const u8, len: usize) -> i32;
    fn msg_set_header = "v1_msg_set_header" (key: *const u8, key_len: usize, val: *const u8, val_len: usize) -> i32;
    fn msg_del_header = "v1_msg_del_header" (key: *const u8, key_len: usize) -> i32;
    fn event_subscription = "v1_event_subscription" (buf: *mut u8, cap: usize) -> i32;
    fn event_group = "v1_event_group" (buf: *mut u8, cap: usize) -> i32;
    fn event_attempt = "v1_event_attempt" () -> i32;
    fn event_in_flight_ns = "v1_event_in_flight_ns" () -> i64;
    fn event_reason = "v1_event_reason" (buf: *mut u8, cap: usize) -> i32;
    fn emit = "v1_emit" (topic: *const u8, topic_len: usize, payload: *const u8, payload_len: usize) -> i32;
    fn emit_header = "v1_emit_header" (handle: i32, key: *const u8, key_len: usize, val: *const u8, val_len: usize) -> i32;
}
