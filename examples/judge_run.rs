//! Writes a synthetic run directory of REQUESTS requests (`haq::bench::runs`: the
//! quickstart's shape, stretched) for measuring `haq check` at scale:
//!
//! ```sh
//! cargo run --release --example judge_run -- DIR REQUESTS
//! /usr/bin/time -v target/release/haq check DIR
//! ```
//!
//! Figures in docs/performance.md ("Judging a stored run").

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(n)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: judge_run DIR REQUESTS");
    };
    let n: u64 = n.parse()?;
    let w = haq::bench::runs::write(
        std::path::Path::new(&dir),
        &haq::bench::runs::RunShape::new(n),
    )?;
    println!(
        "{dir}: {} requests, {} trace lines, {} gateway journal lines",
        w.requests, w.trace_lines, w.journal_lines
    );
    Ok(())
}
