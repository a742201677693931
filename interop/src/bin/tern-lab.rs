//! `tern-lab`: builds and drives labs of network namespaces. Today: `capture`, which
//! records BIRD 2, GoBGP and FRR talking BGP (the codec's golden fixtures).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tern-lab", version, about = "Network-namespace labs for tern")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run BIRD, GoBGP and FRR in namespaces and capture their BGP messages to a pcap.
    Capture {
        /// Directory to write bird-gobgp-frr.pcap into.
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Prefix of the namespace names.
        #[arg(long, default_value = "tlab-")]
        prefix: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Capture { out, prefix } => capture(&out, &prefix),
    }
}

#[cfg(target_os = "linux")]
fn capture(out: &std::path::Path, prefix: &str) -> ExitCode {
    if let Err(reason) = tern_interop::lab_available() {
        eprintln!("tern-lab capture: {reason}");
        return ExitCode::from(2);
    }
    match tern_interop::capture::capture_fixtures(out, prefix) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tern-lab capture: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn capture(_out: &std::path::Path, _prefix: &str) -> ExitCode {
    eprintln!("tern-lab capture: network namespaces exist only on Linux");
    ExitCode::from(2)
}
