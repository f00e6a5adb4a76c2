//! Connecting the processes of a run before timely takes the sockets over: every process
//! connects to those before it in the hosts list and accepts those after it, quietly and
//! within a deadline (timely's own connect prints to standard output and retries forever),
//! and each pair checks that both run the same dataflow on the same number of workers, so
//! a mismatch is an error naming it rather than a failure deep inside the exchange.

use super::Processes;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// What two processes must agree on before they exchange data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Handshake {
    /// The sender's index.
    pub index: u64,
    /// Worker threads per process.
    pub workers: u64,
    /// A hash of the dataflow and of the sizes of its inputs.
    pub fingerprint: u64,
}

const MAGIC: &[u8; 4] = b"TLDD";

impl Handshake {
    fn write(&self, s: &mut TcpStream) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(28);
        buf.extend_from_slice(MAGIC);
        for v in [self.index, self.workers, self.fingerprint] {
            buf.extend_from_slice(&v.to_be_bytes());
        }
        s.write_all(&buf)
    }

    fn read(s: &mut TcpStream) -> std::io::Result<Option<Handshake>> {
        let mut buf = [0u8; 28];
        s.read_exact(&mut buf)?;
        if &buf[..4] != MAGIC {
            return Ok(None);
        }
        let word = |k: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[4 + 8 * k..12 + 8 * k]);
            u64::from_be_bytes(b)
        };
        Ok(Some(Handshake {
            index: word(0),
            workers: word(1),
            fingerprint: word(2),
        }))
    }

    /// Why `peer` cannot take part with this process, if it cannot.
    fn mismatch(&self, peer: &Handshake) -> Option<String> {
        if peer.workers != self.workers {
            return Some(format!(
                "process {} runs {} workers and this one {} (give every process the same `--workers`)",
                peer.index, peer.workers, self.workers
            ));
        }
        (peer.fingerprint != self.fingerprint).then(|| {
            format!(
                "process {} runs another program or read other inputs (every process must run the same program on the same files)",
                peer.index
            )
        })
    }
}

/// One connected socket per other process, in index order (`None` at this one's).
pub(super) fn connect(
    p: &Processes,
    me: Handshake,
    within: Duration,
) -> Result<Vec<Option<TcpStream>>, String> {
    let deadline = Instant::now() + within;
    let n = p.hosts.len();
    let mut sockets: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let listener = TcpListener::bind(&p.hosts[p.index])
        .map_err(|e| format!("cannot listen on {}: {e}", p.hosts[p.index]))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot listen on {}: {e}", p.hosts[p.index]))?;
    for (k, host) in p.hosts.iter().enumerate().take(p.index) {
        let mut s = loop {
            match TcpStream::connect(host) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!(
                        "process {k} at {host} could not be reached within {} s: {e}",
                        within.as_secs()
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let peer = greet(&mut s, me, within)?;
        if peer.index as usize != k {
            return Err(format!(
                "{host} answered as process {} rather than {k} (is the hosts file the same everywhere?)",
                peer.index
            ));
        }
        sockets[k] = Some(s);
    }
    while sockets
        .iter()
        .enumerate()
        .any(|(k, s)| k > p.index && s.is_none())
    {
        match listener.accept() {
            Ok((mut s, _)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                let peer = greet(&mut s, me, within)?;
                let k = peer.index as usize;
                if k <= p.index || k >= n || sockets[k].is_some() {
                    return Err(format!("an unexpected process (index {k}) connected"));
                }
                sockets[k] = Some(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = (p.index + 1..n)
                        .filter(|&k| sockets[k].is_none())
                        .map(|k| format!("{k} ({})", p.hosts[k]))
                        .collect();
                    return Err(format!(
                        "process{} {} did not connect within {} s",
                        if missing.len() == 1 { "" } else { "es" },
                        missing.join(", "),
                        within.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("accepting a connection failed: {e}")),
        }
    }
    Ok(sockets)
}

/// Sends this process's handshake, reads the peer's, and checks they match.
fn greet(s: &mut TcpStream, me: Handshake, within: Duration) -> Result<Handshake, String> {
    let io = |e: std::io::Error| format!("the handshake with a peer failed: {e}");
    s.set_nodelay(true).map_err(io)?;
    s.set_read_timeout(Some(within)).map_err(io)?;
    me.write(s).map_err(io)?;
    let peer = Handshake::read(s)
        .map_err(io)?
        .ok_or("a peer that is not a tl process connected")?;
    s.set_read_timeout(None).map_err(io)?;
    match me.mismatch(&peer) {
        Some(why) => Err(why),
        None => Ok(peer),
    }
}
