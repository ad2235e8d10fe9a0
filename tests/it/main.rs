//! The one integration-test binary (STYLE.md habit 8): a module per area.

mod bench;
mod cli;
mod client;
mod docs;
mod fate;
mod faults;
mod fuzz;
mod gateway;
mod kube;
mod layers;
mod load;
mod m9;
mod report;
mod run;
mod secrets;
mod simkit;
mod splice;
mod support;
mod testgw;
mod url;
mod validity;
mod vantage;
mod verdicts;
mod worker;
mod workload;
