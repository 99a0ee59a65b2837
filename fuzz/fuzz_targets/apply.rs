#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pricing_fuzz::apply(data));
