#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(report) = simplyblock_discovery::decode(data) {
        // A report that decodes encodes and decodes to itself.
        let text = simplyblock_discovery::encode(&report).expect("a decoded report encodes");
        assert_eq!(simplyblock_discovery::decode(text.as_bytes()).ok(), Some(report));
    }
});
