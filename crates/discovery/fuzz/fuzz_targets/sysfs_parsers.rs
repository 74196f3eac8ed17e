#![no_main]
use libfuzzer_sys::fuzz_target;
use simplyblock_discovery::parse;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse::cpu_list(&text);
    let _ = parse::meminfo(&text);
    let _ = parse::uevent(&text);
    let _ = parse::mountinfo(&text);
    let _ = parse::swaps(&text);
    let _ = parse::if_inet6(&text);
    let _ = parse::ipv4_addresses(&text, &text);
    let _ = parse::content(data);
    let _ = parse::volume_nqn(&text);
    let _ = simplyblock_discovery::size::parse_size_range(&text);
});
