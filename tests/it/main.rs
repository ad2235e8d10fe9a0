//! The one integration-test binary (STYLE.md habit 8): a module per area.

mod bench;
mod cli;
mod client;
mod docs;
mod fate;
mod faults;
mod gateway;
mod layers;
mod load;
mod m9;
mod nginx;
mod report;
mod routing;
mod run;
mod simkit;
mod support;
mod url;
mod verdicts;
mod worker;
mod workload;
