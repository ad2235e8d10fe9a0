use std::process::ExitCode;

use clap::Parser;
use haq::cli::{
    BenchCommand, Cli, Command, Exit, SimCommand, cancel_on_signals, execute, interrupted_message,
};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    haq::wire::heap::return_large_buffers();
    haq::install_crypto_provider();
    let cli = Cli::parse();
    // The measuring client runs ahead of compilers and of the system under test when it
    // may (haq::priority); before the runtime so that every thread inherits it. The
    // bench server is part of the instrument (it stamps the truth the client's lag is
    // measured against), so it is favoured like the client it measures.
    if matches!(&cli.command, Command::Run(_) | Command::Agent(_))
        || matches!(&cli.command, Command::Bench(b) if matches!(b.command, BenchCommand::Client { .. } | BenchCommand::Server { .. }))
    {
        haq::priority::raise_for_measurement();
    }
    // Sim processes run on one current-thread runtime each: a worker's engine loop and
    // its HTTP side share the thread (tokens reach their sockets without a cross-thread
    // wake-up; the `after_event` fault hook relies on it, see sim::worker::out); the
    // gateway relays more events per CPU second without work stealing (the relay is
    // syscall-bound, docs/performance.md); the tool service is light.
    let rt = match &cli.command {
        Command::Sim(s)
            if matches!(
                s.command,
                SimCommand::Worker { .. } | SimCommand::Tools { .. } | SimCommand::Gateway { .. }
            ) =>
        {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        }
        // The benchmark's server stays on one core, leaving the other to the client.
        Command::Bench(b) if matches!(b.command, BenchCommand::Server { .. }) => {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        }
        // One worker thread: with every event a separate socket read, waking a second
        // worker costs more than it helps (measured: 1.7 vs 2.6 CPU-s per 100k events,
        // docs/performance.md). The dispatcher and the trace writer have their own
        // threads. `HAQ_WORKER_THREADS` overrides (0: a current-thread runtime).
        _ => {
            let n = std::env::var("HAQ_WORKER_THREADS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            if n == 0 {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            } else {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(n)
                    .enable_all()
                    .build()
            }
        }
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Unusable.into();
        }
    };
    // Sim processes keep the default signal dispositions (SIGKILL crashes them, SIGTERM
    // ends the gateway and tool service); a worker handles SIGTERM itself as a drain.
    let sim_process = matches!(&cli.command, Command::Sim(s)
        if matches!(s.command, SimCommand::Worker { .. } | SimCommand::Gateway { .. } | SimCommand::Tools { .. }))
        || matches!(&cli.command, Command::Bench(b) if matches!(b.command, BenchCommand::Server { .. }));
    rt.block_on(async {
        let cancel = CancellationToken::new();
        if !sim_process {
            cancel_on_signals(cancel.clone(), interrupted_message(&cli.command));
        }
        execute(cli, cancel).await.into()
    })
}
