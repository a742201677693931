//! The `tern` command line (README.md, docs/daemon.md): `run` (the daemon), the
//! control-socket commands (`status`, `peers`, `routes`, `fib`, `diagnose`, `health`,
//! `reload`), `check-config`, `decode`, and `completions` / `man` (what the Debian
//! package ships as shell completions and manual pages).

use std::io::{Read, Write};
use std::process::ExitCode;

use bytes::Bytes;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use tern::capture::{self, Flow};
use tern::control::cli::CliCommand;
use tern::decode::{self, Input, Overrides};

mod man;

#[derive(Parser)]
#[command(
    name = "tern",
    version,
    about = "BGP routing daemon for Kubernetes nodes",
    long_about = "BGP routing daemon for Kubernetes nodes that route pod traffic natively, \
                  the way Calico does with BIRD and confd. `tern run` reads the cluster's \
                  Calico resources (a file, etcd or the Kubernetes API), keeps the BGP \
                  sessions, advertises the node's IPAM blocks and programs the kernel's \
                  routing table; the other commands validate a configuration or ask the \
                  running daemon through its control socket."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The control socket, before or after the command.
    ///
    /// Default: $TERN_SOCKET, else /run/tern/tern.sock; on Windows \\.\pipe\tern.
    #[arg(long, global = true)]
    socket: Option<std::path::PathBuf>,
    /// Output format (text, wide, json, yaml), before or after the command.
    ///
    /// text for people, wide (text with more columns), json or yaml for scripts
    /// (stable field names, see docs/json.md).
    #[arg(long, short, global = true, value_enum, default_value = "text")]
    output: OutputFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Print BGP messages from a capture (pcap/pcapng), hex text or a raw byte stream.
    Decode(DecodeArgs),
    /// Run the daemon in the foreground.
    ///
    /// systemd Type=notify; SIGHUP re-reads the datastore, SIGTERM stops and leaves
    /// the kernel routes in place.
    Run {
        /// The daemon's file.
        #[arg(long, short, default_value = "/etc/tern/tern.yaml")]
        config: std::path::PathBuf,
    },
    /// The daemon and one table of peers per family, like `calicoctl node status`.
    ///
    /// The daemon's node, router id, AS and uptime, then one table of peers per
    /// family. `-o wide` adds vtysh's columns (AS, Up/Down, PfxRcd, PfxSnt, MsgRcvd,
    /// MsgSent).
    Status,
    /// Per peer: state, uptime, capabilities, prefix counts, last error.
    ///
    /// With ADDR, that peer in detail: also the negotiated hold time and keepalive,
    /// the remote router id, the TCP endpoints, messages by type each way, the last
    /// NOTIFICATION each way, graceful restart, TCP-MD5 and GTSM, the BGPFilters.
    Peers {
        /// Only this peer, in detail.
        address: Option<String>,
    },
    /// The Loc-RIB; --all every path and why it won or lost, --count totals.
    ///
    /// Prefix, next hops, AS path, communities, source and flags per route;
    /// `--all` lists every path with the decision step it won or lost by,
    /// `--count` the prefixes and paths per family and per peer, `--received PEER`
    /// what PEER sent: the paths accepted and those rejected (by import policy, the
    /// RFC checks or as malformed), each with why; PREFIX is then an exact prefix.
    Routes {
        /// Only this prefix, or the routes covering this address.
        prefix: Option<String>,
        /// Only routes from this peer.
        #[arg(long)]
        peer: Option<String>,
        /// The routes advertised to --peer (its Adj-RIB-Out) instead of the Loc-RIB.
        #[arg(long, conflicts_with_all = ["all", "count"])]
        advertised: bool,
        /// Every path of each prefix, with the decision step it won or lost by.
        #[arg(long, conflicts_with = "count")]
        all: bool,
        /// Totals per family and per peer instead of routes.
        #[arg(long, conflicts_with_all = ["prefix", "peer"])]
        count: bool,
        /// Only this address family.
        #[arg(long, value_parser = ["ipv4", "ipv6"])]
        family: Option<String>,
        /// What PEER sent (its Adj-RIB-In): accepted paths, and rejected ones with why.
        #[arg(long, value_name = "PEER", conflicts_with_all = ["peer", "advertised", "all", "count"])]
        received: Option<String>,
    },
    /// What tern installed in the kernel and any difference from what it wants.
    Fib,
    /// Layer-2 reachability of peers and next hops, failed neighbours, refused routes.
    Diagnose,
    /// Exit 0 when live (--live) and/or ready (--ready; calico-node's rules).
    Health {
        /// Check liveness.
        #[arg(long)]
        live: bool,
        /// Check readiness.
        #[arg(long)]
        ready: bool,
    },
    /// Re-read the datastore now and apply what changed.
    Reload,
    /// Reset one peer's session (root only): hard, or --soft in|out.
    ///
    /// Hard: Cease / Administrative Reset, then the session starts again; its routes go
    /// until it is back. --soft in: ROUTE-REFRESH, the peer sends its routes again.
    /// --soft out: every route is sent to it again.
    Reset {
        /// The peer's address.
        peer: String,
        /// Soft reset instead: `in` or `out`.
        #[arg(long, value_parser = ["in", "out"])]
        soft: Option<String>,
        /// Text for the NOTIFICATION of a hard reset (RFC 9003).
        #[arg(long)]
        message: Option<String>,
    },
    /// Close one peer's session and keep it down (root only) until `tern enable`.
    Disable {
        /// The peer's address.
        peer: String,
        /// Text for the NOTIFICATION (RFC 9003).
        #[arg(long)]
        message: Option<String>,
    },
    /// Start a disabled peer's session again (root only).
    Enable {
        /// The peer's address.
        peer: String,
    },
    /// Watch session and route changes live, until interrupted.
    ///
    /// One line per change: sessions going up, down or through their states, and the
    /// Loc-RIB's best path of a prefix changing or going. `-o json` prints one JSON
    /// object per line.
    Monitor {
        /// Only this peer's session changes and the routes it provides (withdrawals
        /// name no peer and are always shown).
        #[arg(long)]
        peer: Option<String>,
        /// Only routes inside this prefix, or covering this address.
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Drain before maintenance (root only): RFC 8326 GRACEFUL_SHUTDOWN on every route.
    ///
    /// Every route sent carries the GRACEFUL_SHUTDOWN community (65535:0) and, towards
    /// iBGP peers, LOCAL_PREF 0, so peers move their traffic to other paths while the
    /// sessions stay up. Lasts until `tern undrain` or a restart.
    Drain,
    /// End `tern drain` (root only).
    Undrain,
    /// Set the daemon's log filter until it restarts (root only).
    #[command(name = "log-level")]
    LogLevel {
        /// A level (trace, debug, info, warn, error, off) or a filter (tern=debug,info).
        level: String,
    },
    /// Windows service: `install --config PATH`, `uninstall`, `run` (used by the SCM).
    Service {
        #[command(subcommand)]
        action: ServiceAction,
    },
    /// Validate tern.yaml and the cluster's resources without running.
    ///
    /// Also reads each peer's password source (an unreadable one is an error, as the
    /// daemon refuses that peer), and shows this node's peers and originated
    /// prefixes. Exit code 1 when anything is invalid.
    CheckConfig {
        /// The daemon's file.
        #[arg(long, short, default_value = "/etc/tern/tern.yaml")]
        config: std::path::PathBuf,
    },
    /// Print a shell's completion script for tern on standard output.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page tern(8), or write every page into a directory.
    ///
    /// tern(8) in roff on standard output; with --dir, tern.8 and one page per
    /// command (tern-run(8), ...) written there.
    Man {
        /// Write tern.8 and tern-COMMAND.8 here instead.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
}

/// `tern service ...`.
#[derive(Subcommand)]
enum ServiceAction {
    /// Register tern as an automatic Windows service running as LocalSystem.
    Install {
        /// The daemon's file.
        #[arg(long, short, default_value = r"C:\ProgramData\tern\tern.yaml")]
        config: std::path::PathBuf,
    },
    /// Stop and remove the service.
    Uninstall,
    /// The service's entry point (started by the Service Control Manager).
    Run {
        /// The daemon's file.
        #[arg(long, short, default_value = r"C:\ProgramData\tern\tern.yaml")]
        config: std::path::PathBuf,
    },
}

/// `-o`, of every command.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OutputFormat {
    /// Tables and text for people.
    Text,
    /// Text with more columns (`status`: vtysh's counters).
    Wide,
    /// JSON (stable field names, see docs/json.md).
    Json,
    /// The same document as YAML.
    Yaml,
}

impl OutputFormat {
    fn cli(self) -> tern::control::cli::Output {
        use tern::control::cli::Output;
        match self {
            OutputFormat::Text => Output::Text,
            OutputFormat::Wide => Output::Wide,
            OutputFormat::Json => Output::Json,
            OutputFormat::Yaml => Output::Yaml,
        }
    }
}

/// Asks the daemon: the global `--socket` and `-o` apply.
fn inspect(
    socket: Option<std::path::PathBuf>,
    output: OutputFormat,
    command: CliCommand,
) -> ExitCode {
    let socket = socket.unwrap_or_else(tern::control::client::default_socket);
    tern::control::cli::run(command, &socket, output.cli())
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Detect: pcap/pcapng by magic number, hex if the input is hex text, else raw.
    Auto,
    /// A pcap or pcapng capture.
    Pcap,
    /// Hex text (whitespace, ':' and 0x are ignored).
    Hex,
    /// Concatenated BGP messages as bytes.
    Raw,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AddPath {
    None,
    Ipv4,
    Ipv6,
    Both,
}

#[derive(clap::Args)]
struct DecodeArgs {
    /// Input file; `-` or nothing reads standard input.
    file: Option<String>,
    /// Input format.
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    format: Format,
    /// Decode AS numbers as 2 octets (default: learnt from OPENs, else 4 octets).
    #[arg(long, conflicts_with = "four_octet_as")]
    two_octet_as: bool,
    /// Decode AS numbers as 4 octets.
    #[arg(long)]
    four_octet_as: bool,
    /// NLRI carry ADD-PATH identifiers (default: learnt from OPENs, else none).
    #[arg(long, value_enum)]
    add_path: Option<AddPath>,
    /// Longest prefix list printed in text output.
    #[arg(long, default_value_t = 20)]
    max_prefixes: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (socket, output) = (cli.socket, cli.output);
    let ask = |command| inspect(socket.clone(), output, command);
    match cli.command {
        Command::Decode(a) => run_decode(a, output),
        Command::Run { config } => {
            // Before the runtime opens anything; logging is not set up yet, hence stderr.
            #[cfg(target_os = "linux")]
            if let Err(e) = tern::rlimit::raise() {
                eprintln!("tern: warning: {e}");
            }
            tern::daemon::run(&config)
        }
        Command::Service { action } => match action {
            ServiceAction::Install { config } => tern::service::install(&config),
            ServiceAction::Uninstall => tern::service::uninstall(),
            ServiceAction::Run { config } => tern::service::run(&config),
        },
        Command::Status => ask(CliCommand::Status),
        Command::Peers { address } => ask(CliCommand::Peers { address }),
        Command::Routes {
            prefix,
            peer,
            advertised,
            all,
            count,
            family,
            received,
        } => ask(CliCommand::Routes {
            prefix,
            peer,
            advertised,
            all,
            count,
            family,
            received,
        }),
        Command::Fib => ask(CliCommand::Fib),
        Command::Diagnose => ask(CliCommand::Diagnose),
        Command::Health { live, ready } => ask(CliCommand::Health { live, ready }),
        Command::Reload => ask(CliCommand::Reload),
        Command::Reset {
            peer,
            soft,
            message,
        } => ask(CliCommand::PeerAction {
            address: peer,
            action: match soft.as_deref() {
                Some("in") => "soft-in",
                Some(_) => "soft-out",
                None => "reset",
            }
            .into(),
            message,
        }),
        Command::Disable { peer, message } => ask(CliCommand::PeerAction {
            address: peer,
            action: "disable".into(),
            message,
        }),
        Command::Enable { peer } => ask(CliCommand::PeerAction {
            address: peer,
            action: "enable".into(),
            message: None,
        }),
        Command::LogLevel { level } => ask(CliCommand::LogLevel { level }),
        Command::Monitor { peer, prefix } => {
            let socket = socket.unwrap_or_else(tern::control::client::default_socket);
            tern::control::cli::monitor(&socket, peer, prefix, output.cli())
        }
        Command::Drain => ask(CliCommand::Drain { on: true }),
        Command::Undrain => ask(CliCommand::Drain { on: false }),
        Command::Completions { shell } => run_completions(shell),
        Command::Man { dir } => match man::write(Cli::command(), dir.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tern man: {e}");
                ExitCode::from(1)
            }
        },
        Command::CheckConfig { config } => run_check_config(&config, output),
    }
}

/// `tern completions SHELL`: the script on standard output.
fn run_completions(shell: clap_complete::Shell) -> ExitCode {
    // Into memory first: clap_complete panics on a failed write (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "tern", &mut script);
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tern completions: cannot write to standard output: {e}");
            ExitCode::from(1)
        }
    }
}

/// `tern check-config`: the report, text or a document; exit 1 with errors.
fn run_check_config(config: &std::path::Path, output: OutputFormat) -> ExitCode {
    let report = tern::check_config::check(config);
    match output {
        OutputFormat::Text | OutputFormat::Wide => {
            print!("{}", tern::check_config::render(&report))
        }
        OutputFormat::Json | OutputFormat::Yaml => {
            let doc = tern::check_config::to_json(&report);
            if let Err(e) = tern::control::cli::print_document(&doc, output.cli()) {
                eprintln!("tern check-config: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run_decode(a: DecodeArgs, output: OutputFormat) -> ExitCode {
    let name = a.file.clone().unwrap_or_else(|| "-".into());
    let data = match read_input(&name) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tern decode: cannot read {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let format = match a.format {
        Format::Auto if capture::looks_like_pcap(&data) => Format::Pcap,
        Format::Auto if is_hex_text(&data) => Format::Hex,
        Format::Auto => Format::Raw,
        f => f,
    };
    let warnings: Vec<String>;
    let inputs: Vec<Input> = match format {
        Format::Pcap => match capture::read_pcap(&data, &name) {
            Ok(c) => {
                warnings = c.warnings;
                c.messages.into_iter().map(Input::from).collect()
            }
            Err(e) => {
                eprintln!("tern decode: {e}");
                return ExitCode::from(2);
            }
        },
        _ => {
            let bytes = if format == Format::Hex {
                match capture::parse_hex(&String::from_utf8_lossy(&data)) {
                    Ok(b) => b,
                    Err(e) => {
                        eprintln!("tern decode: {name}: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                data
            };
            let (msgs, problems) = capture::split_stream(Bytes::from(bytes));
            warnings = problems
                .into_iter()
                .map(|p| format!("{name}: {p}"))
                .collect();
            msgs.into_iter()
                .map(|bytes| Input {
                    flow: None::<Flow>,
                    timestamp: None,
                    bytes,
                })
                .collect()
        }
    };
    let overrides = Overrides {
        four_octet_as: if a.two_octet_as {
            Some(false)
        } else {
            a.four_octet_as.then_some(true)
        },
        add_path: a.add_path.map(|p| match p {
            AddPath::None => (false, false),
            AddPath::Ipv4 => (true, false),
            AddPath::Ipv6 => (false, true),
            AddPath::Both => (true, true),
        }),
        extended_message: None,
    };
    let decoded = decode::decode_all(inputs, overrides);
    let failed = decoded.iter().filter(|d| d.error.is_some()).count();
    match output {
        OutputFormat::Json | OutputFormat::Yaml => {
            let doc = serde_json::json!({ "messages": decoded, "warnings": warnings });
            if let Err(e) = tern::control::cli::print_document(&doc, output.cli()) {
                eprintln!("tern decode: {e}");
                return ExitCode::from(2);
            }
        }
        OutputFormat::Text | OutputFormat::Wide => {
            for d in &decoded {
                println!("{}", decode::render_text(d, a.max_prefixes));
            }
            for w in &warnings {
                eprintln!("warning: {w}");
            }
            eprintln!("{} messages, {} malformed", decoded.len(), failed);
        }
    }
    if decoded.is_empty() && !warnings.is_empty() {
        return ExitCode::from(2);
    }
    if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn read_input(name: &str) -> std::io::Result<Vec<u8>> {
    if name == "-" {
        let mut v = Vec::new();
        std::io::stdin().read_to_end(&mut v)?;
        Ok(v)
    } else {
        std::fs::read(name)
    }
}

fn is_hex_text(data: &[u8]) -> bool {
    !data.is_empty()
        && data.iter().all(|b| {
            b.is_ascii_hexdigit()
                || b.is_ascii_whitespace()
                || matches!(b, b':' | b',' | b'x' | b'X')
        })
}
