//! Contract suites of the ports (filled in by the embedded-adapter work).
