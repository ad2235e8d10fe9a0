//! The one integration-test binary (STYLE.md habit 8): a module per area.

mod cli;
mod faults;
mod run;
mod support;
