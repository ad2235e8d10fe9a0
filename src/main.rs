use std::process::ExitCode;

use clap::Parser;
use haq::cli::{Cli, Command, Exit, SimCommand, cancel_on_signals, execute};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    haq::install_crypto_provider();
    let cli = Cli::parse();
    // Sim processes serve many streams; the CLI itself needs fewer threads.
    let rt = match &cli.command {
        Command::Sim(s) if matches!(s.command, SimCommand::Worker { .. }) => {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        }
        _ => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Unusable.into();
        }
    };
    // Sim processes keep the default signal dispositions: SIGTERM/SIGKILL end them.
    let sim_process = matches!(&cli.command, Command::Sim(s)
        if matches!(s.command, SimCommand::Worker { .. } | SimCommand::Gateway { .. }));
    rt.block_on(async {
        let cancel = CancellationToken::new();
        if !sim_process {
            cancel_on_signals(cancel.clone());
        }
        execute(cli, cancel).await.into()
    })
}
