//! Helpers shared by ircc's integration tests in `tests/`.
