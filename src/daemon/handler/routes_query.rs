//! `tern routes` in all its forms (the Loc-RIB, `--all`, `--count`, `--advertised`,
//! `--received`): asks the speaker and the FIB task, builds the reply, and encodes it
//! once: as the JSON document, or (`render`, what the CLI asks for) as what the CLI
//! prints, the table or the pretty JSON, rendered here so that a 100,000-route answer
//! is not decoded into a tree and laid out again by the client.

use std::collections::HashSet;

use ipnet::IpNet;
use tern_bgp::speaker::SpeakerCommand;
use tokio::sync::oneshot;

use super::{
    advertised_info, ask, parse_address, parse_prefix_or_address, routes, text, DaemonHandler,
    FibMsg,
};
use crate::control::proto::{ReceivedReply, Render, Request, RoutesCountReply, RoutesReply};
use crate::control::render;

/// What `tern routes` asked for (Loc-RIB view).
pub(super) struct RoutesQuery<'a> {
    pub prefix: Option<&'a str>,
    pub peer: Option<&'a str>,
    pub family: Option<&'a str>,
    pub all: bool,
    pub count: bool,
}

/// One of `tern routes`'s replies.
pub(super) enum Answer {
    Routes(RoutesReply),
    Count(RoutesCountReply),
    Received(ReceivedReply),
}

impl Answer {
    /// The JSON text of the reply, or of what the CLI prints (`render`).
    fn encode(&self, render: Option<Render>) -> Result<String, String> {
        match render {
            None => match self {
                Answer::Routes(r) => text(r),
                Answer::Count(r) => text(r),
                Answer::Received(r) => text(r),
            },
            Some(Render::Table) => text(&match self {
                Answer::Routes(r) => render::routes(r),
                Answer::Count(r) => render::routes_count(r),
                Answer::Received(r) => render::received(r),
            }),
            Some(Render::Json) => {
                // Pretty-printed straight into the JSON string that carries it: one
                // buffer, not the document and then its quoted copy.
                let mut out = JsonString::default();
                let written = match self {
                    Answer::Routes(r) => serde_json::to_writer_pretty(&mut out, r),
                    Answer::Count(r) => serde_json::to_writer_pretty(&mut out, r),
                    Answer::Received(r) => serde_json::to_writer_pretty(&mut out, r),
                };
                written.map_err(|e| format!("cannot encode the reply: {e}"))?;
                Ok(out.finish("\n"))
            }
        }
    }
}

/// A JSON string being written: what is written to it is escaped as it comes.
struct JsonString(Vec<u8>);

impl Default for JsonString {
    fn default() -> JsonString {
        JsonString(vec![b'"'])
    }
}

impl std::io::Write for JsonString {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            match b {
                b'"' => self.0.extend_from_slice(b"\\\""),
                b'\\' => self.0.extend_from_slice(b"\\\\"),
                b'\n' => self.0.extend_from_slice(b"\\n"),
                b'\r' => self.0.extend_from_slice(b"\\r"),
                b'\t' => self.0.extend_from_slice(b"\\t"),
                0..=0x1f => self.0.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
                // UTF-8 sequences pass as they are: valid in a JSON string.
                _ => self.0.push(b),
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl JsonString {
    /// The JSON text of the string, with `tail` (plain text) added at its end.
    fn finish(mut self, tail: &str) -> String {
        use std::io::Write as _;
        let _ = self.write_all(tail.as_bytes());
        self.0.push(b'"');
        // Only whole UTF-8 sequences and ASCII escapes went in.
        String::from_utf8(self.0)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

impl DaemonHandler {
    /// A `routes` request, answered as JSON text; `None` for any other request.
    pub(super) async fn routes_request(&self, request: &Request) -> Option<Result<String, String>> {
        let Request::Routes {
            prefix,
            peer,
            advertised,
            all,
            count,
            family,
            received,
            render,
        } = request
        else {
            return None;
        };
        let (prefix, family) = (prefix.as_deref(), family.as_deref());
        let answer = if let Some(from) = received {
            self.received(from, prefix, family)
                .await
                .map(Answer::Received)
        } else if *advertised {
            self.advertised(prefix, peer.as_deref(), family)
                .await
                .map(Answer::Routes)
        } else {
            let q = RoutesQuery {
                prefix,
                peer: peer.as_deref(),
                family,
                all: *all,
                count: *count,
            };
            self.loc_rib_view(q).await
        };
        Some(answer.and_then(|a| a.encode(*render)))
    }

    /// `tern routes --advertised --peer ADDR [PREFIX]`: the peer's Adj-RIB-Out.
    async fn advertised(
        &self,
        prefix: Option<&str>,
        peer: Option<&str>,
        family: Option<&str>,
    ) -> Result<RoutesReply, String> {
        let v6 = family.map(routes::parse_family).transpose()?;
        let Some(peer) = peer else {
            return Err("--advertised needs --peer ADDR: whose Adj-RIB-Out to show".into());
        };
        let addr = parse_address(peer)?;
        let sent = self
            .ask_speaker(|tx| SpeakerCommand::Advertised(addr, tx))
            .await?
            .ok_or_else(|| format!("{addr} is not an established peer"))?;
        let routes = sent
            .into_iter()
            .filter(|(p, _)| prefix.is_none_or(|w| p.to_string() == w))
            .filter(|(p, _)| v6.is_none_or(|v6| matches!(p, IpNet::V6(_)) == v6))
            .map(|(p, e)| advertised_info(p, &e, addr))
            .collect();
        Ok(RoutesReply { routes })
    }

    /// `tern routes [PREFIX|ADDR] [--peer ADDR] [--family F] [--all]`: the Loc-RIB,
    /// with what the FIB task installed and, with `--all`, every path.
    async fn loc_rib_view(&self, q: RoutesQuery<'_>) -> Result<Answer, String> {
        let filter = routes::Filter {
            prefix: q.prefix.map(parse_prefix_or_address).transpose()?,
            peer: q.peer.map(parse_address).transpose()?,
            v6: q.family.map(routes::parse_family).transpose()?,
        };
        // A prefix or an address: only its routes are copied from the speaker and
        // looked up at the FIB task, not the table (a million routes take a second).
        let rib = match (filter.prefix, q.count) {
            (Some(want), false) => {
                self.ask_speaker(|tx| SpeakerCommand::RoutesOf(want, tx))
                    .await?
            }
            _ => self.ask_speaker(SpeakerCommand::Routes).await?,
        };
        let only: Option<Vec<IpNet>> = filter.prefix.map(|_| rib.iter().map(|(p, _)| *p).collect());
        let paths = match (&only, q.all || q.count) {
            (_, false) => Vec::new(),
            (Some(list), true) if !q.count => {
                let list = list.clone();
                self.ask_speaker(|tx| SpeakerCommand::PathsOf(list, tx))
                    .await?
            }
            _ => self.ask_speaker(SpeakerCommand::Paths).await?,
        };
        if q.count {
            return Ok(Answer::Count(routes::count(&rib, &paths, filter.v6)));
        }
        let (tx, rx) = oneshot::channel();
        let installed: HashSet<IpNet> = match self.fib.send(FibMsg::Installed(only, tx)).await {
            Ok(()) => ask("FIB task", rx)
                .await
                .unwrap_or_default()
                .into_iter()
                .collect(),
            Err(_) => HashSet::new(),
        };
        let (intent, kernel_learned) = {
            let s = self.lock()?;
            (s.intent.clone(), s.kernel_originated.clone())
        };
        let cx = routes::Context {
            intent: intent.as_ref(),
            kernel_learned: &kernel_learned,
            installed: &installed,
        };
        let mut rows = routes::rows(&rib, filter, &cx);
        if q.all {
            routes::add_paths(&mut rows, &rib, &paths, &cx);
        }
        Ok(Answer::Routes(RoutesReply { routes: rows }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test: a panic is the failure report

    use super::JsonString;

    #[test]
    fn the_escaping_writer_gives_what_serde_json_gives() {
        let doc =
            "{\n  \"as_path\": \"65001 {64512,64513}\",\n  \"x\": \"a\\\\b\\tc\u{1}é\u{2603}\"\r}";
        let mut w = JsonString::default();
        std::io::Write::write_all(&mut w, doc.as_bytes()).unwrap();
        let got = w.finish("\n");
        assert_eq!(got, serde_json::to_string(&format!("{doc}\n")).unwrap());
        let back: String = serde_json::from_str(&got).unwrap();
        assert_eq!(back, format!("{doc}\n"));
    }
}
