//! Which of the black-box tests' outside needs this build has (see
//! `tests/it/common/needs.rs`): a test whose need is missing is built as
//! ignored, with its reason.

include!("tests/it/common/needs.rs");

fn main() {
    emit_needs(|_| true);
}
