//! A fault proxy: a TCP forwarder on loopback between one process (a worker, `revenant
//! serve`) and PostgreSQL, whose [`Mode`] a test switches while the process runs:
//!
//! - [`Mode::Pass`]: bytes go through as they come;
//! - [`Mode::Delay`]: every chunk from the client waits a time drawn from a range
//!   before it goes on (so every query answers that much later), in order;
//! - [`Mode::Blackhole`]: the way real networks fail: the proxy stops reading and
//!   writing, and keeps every socket open. No reset, no FIN: a query sent is never
//!   answered, and a new connection is accepted and never gets a byte back. Bytes
//!   already read are held, and go on when the mode changes back (as TCP retransmits
//!   them once a partition heals);
//! - [`Mode::Cut`]: every connection is closed, and new ones are closed as soon as
//!   they are accepted.
//!
//! Only loopback: the proxy listens on `127.0.0.1` on a port the system picks, and
//! stops when it is dropped (every connection with it).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::behaviour::mix64;

/// What the proxy does to the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything at once.
    Pass,
    /// Hold each chunk from the client for a time drawn (seeded) from `min..=max`
    /// before forwarding it; answers come back at once.
    Delay {
        /// The shortest delay.
        min: Duration,
        /// The longest delay.
        max: Duration,
    },
    /// Read nothing, write nothing, close nothing.
    Blackhole,
    /// Close every connection; close new ones at once.
    Cut,
}

/// A running proxy. Dropping it stops it and closes its connections.
pub struct FaultProxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy in [`Mode::Pass`] to `upstream` (a loopback address: the proxy
    /// refuses any other, so no test can aim a fault at another machine).
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        if !upstream.ip().is_loopback() {
            return Err(std::io::Error::other(format!(
                "the fault proxy only forwards to loopback, not to {upstream}"
            )));
        }
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, watching) = watch::channel(Mode::Pass);
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(accept(listener, upstream, watching, accepted.clone()));
        Ok(FaultProxy {
            addr,
            mode,
            accepted,
            task,
        })
    }

    /// Starts a proxy to the host and port of a `postgres://` URL.
    pub async fn for_url(url: &str) -> std::io::Result<FaultProxy> {
        let (host, port) = host_port(url)
            .ok_or_else(|| std::io::Error::other(format!("no host:port to proxy in {url:?}")))?;
        let upstream = tokio::net::lookup_host((host.as_str(), port))
            .await?
            .find(|a| a.ip().is_loopback())
            .ok_or_else(|| {
                std::io::Error::other(format!("{host}:{port} is not a loopback address"))
            })?;
        FaultProxy::start(upstream).await
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `url` with its host and port replaced by the proxy's.
    pub fn url(&self, url: &str) -> String {
        with_host_port(url, &self.addr.to_string())
    }

    /// Switches the mode, for every connection now and later.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// The mode now.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Connections end with the sender: each waits on it.
        self.mode.send_replace(Mode::Cut);
        self.task.abort();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
    accepted: Arc<AtomicUsize>,
) {
    let chunks = Arc::new(AtomicU64::new(0));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        accepted.fetch_add(1, Ordering::Relaxed);
        if *mode.borrow() == Mode::Cut {
            drop(client);
            continue;
        }
        tokio::spawn(connection(client, upstream, mode.clone(), chunks.clone()));
    }
}

async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
    chunks: Arc<AtomicU64>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, mode.clone(), Some(chunks));
    let down = pump(server_read, client_write, mode, None);
    tokio::join!(up, down);
}

/// Waits until the mode lets bytes through; `None` when the connection is to close.
async fn open(mode: &mut watch::Receiver<Mode>) -> Option<Mode> {
    loop {
        let now = *mode.borrow_and_update();
        match now {
            Mode::Cut => return None,
            Mode::Blackhole => {
                if mode.changed().await.is_err() {
                    return None;
                }
            }
            Mode::Pass | Mode::Delay { .. } => return Some(now),
        }
    }
}

/// Carries one direction. `delays` is given for the client-to-server direction, the
/// one [`Mode::Delay`] slows (its counter seeds each chunk's delay).
async fn pump(
    mut from: OwnedReadHalf,
    to: OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    delays: Option<Arc<AtomicU64>>,
) {
    let (queue, held) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(write(to, held, mode.clone()));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let Some(now) = open(&mut mode).await else {
            break;
        };
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            // Look at the mode again (black-holed: stop reading).
            changed = mode.changed() => {
                if changed.is_err() {
                    break;
                }
                continue;
            }
        };
        let delay = match (now, &delays) {
            (Mode::Delay { min, max }, Some(counter)) => {
                let span = max.saturating_sub(min).as_micros() as u64;
                let draw = mix64(counter.fetch_add(1, Ordering::Relaxed));
                min + Duration::from_micros(if span == 0 { 0 } else { draw % (span + 1) })
            }
            _ => Duration::ZERO,
        };
        if queue
            .send((Instant::now() + delay, buf[..n].to_vec()))
            .is_err()
        {
            break;
        }
    }
    drop(queue);
    if *mode.borrow() == Mode::Cut {
        writer.abort();
    }
    let _ = writer.await;
}

async fn write(
    mut to: OwnedWriteHalf,
    mut held: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
    mut mode: watch::Receiver<Mode>,
) {
    while let Some((at, bytes)) = held.recv().await {
        tokio::time::sleep_until(at).await;
        if open(&mut mode).await.is_none() {
            return;
        }
        if to.write_all(&bytes).await.is_err() {
            return;
        }
    }
    let _ = to.shutdown().await;
}

/// The host and port of `scheme://[user[:password]@]host[:port][/...]` (port 5432
/// when absent).
pub fn host_port(url: &str) -> Option<(String, u16)> {
    let (start, end) = authority(url)?;
    let hostport = &url[start..end];
    let (host, port) = match hostport.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || hostport.starts_with('[') => {
            (host, port.parse().ok()?)
        }
        _ => (hostport, 5432),
    };
    Some((host.trim_matches(['[', ']']).to_string(), port))
}

/// `url` with `host:port` in place of its own.
pub fn with_host_port(url: &str, hostport: &str) -> String {
    match authority(url) {
        Some((start, end)) => format!("{}{hostport}{}", &url[..start], &url[end..]),
        None => url.to_string(),
    }
}

/// Byte range of the host and port in a URL.
fn authority(url: &str) -> Option<(usize, usize)> {
    let after_scheme = url.find("://")? + 3;
    let rest = &url[after_scheme..];
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let start = rest[..end].rfind('@').map_or(0, |at| at + 1);
    Some((after_scheme + start, after_scheme + end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_the_proxy_in_place_of_their_host_and_port() {
        let url = "postgres://postgres:pw@127.0.0.1:5432/postgres?sslmode=disable";
        assert_eq!(host_port(url), Some(("127.0.0.1".to_string(), 5432)));
        assert_eq!(
            with_host_port(url, "127.0.0.1:40000"),
            "postgres://postgres:pw@127.0.0.1:40000/postgres?sslmode=disable"
        );
        assert_eq!(
            host_port("postgres://localhost/db"),
            Some(("localhost".to_string(), 5432))
        );
        assert_eq!(
            with_host_port("postgres://localhost/db", "127.0.0.1:1"),
            "postgres://127.0.0.1:1/db"
        );
    }

    /// An echo server on loopback, and a proxy in front of it.
    async fn echo() -> (FaultProxy, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if socket.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        (FaultProxy::start(addr).await.unwrap(), server)
    }

    async fn round_trip(client: &mut TcpStream, bytes: &[u8]) -> Vec<u8> {
        client.write_all(bytes).await.unwrap();
        let mut got = vec![0u8; bytes.len()];
        client.read_exact(&mut got).await.unwrap();
        got
    }

    #[tokio::test]
    async fn a_blackhole_answers_nothing_closes_nothing_and_delivers_once_healed() {
        let (proxy, _server) = echo().await;
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut client, b"one").await, b"one");
        proxy.set(Mode::Blackhole);
        client.write_all(b"two").await.unwrap();
        let mut buf = [0u8; 3];
        let waited =
            tokio::time::timeout(Duration::from_millis(300), client.read_exact(&mut buf)).await;
        assert!(waited.is_err(), "a black-holed connection answered");
        // A new connection is accepted, and answers nothing either.
        let mut other = TcpStream::connect(proxy.addr()).await.unwrap();
        other.write_all(b"new").await.unwrap();
        let waited =
            tokio::time::timeout(Duration::from_millis(300), other.read_exact(&mut buf)).await;
        assert!(waited.is_err(), "a new black-holed connection answered");
        proxy.set(Mode::Pass);
        // The held bytes go on: the cut-off call is answered after the heal.
        tokio::time::timeout(Duration::from_secs(30), client.read_exact(&mut buf))
            .await
            .expect("answered after the heal")
            .unwrap();
        assert_eq!(&buf, b"two");
        tokio::time::timeout(Duration::from_secs(30), other.read_exact(&mut buf))
            .await
            .expect("the new connection answered after the heal")
            .unwrap();
        assert_eq!(&buf, b"new");
    }

    #[tokio::test]
    async fn a_cut_closes_connections_and_refuses_new_ones_until_it_passes_again() {
        let (proxy, _server) = echo().await;
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut client, b"one").await, b"one");
        proxy.set(Mode::Cut);
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_secs(30), client.read(&mut buf))
            .await
            .expect("the cut connection ends");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        let mut refused = TcpStream::connect(proxy.addr()).await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(30), refused.read(&mut buf))
            .await
            .expect("a new connection is closed at once");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        proxy.set(Mode::Pass);
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut again, b"two").await, b"two");
    }

    #[tokio::test]
    async fn a_delay_holds_each_request_at_least_its_minimum() {
        let (proxy, _server) = echo().await;
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.set(Mode::Delay {
            min: Duration::from_millis(200),
            max: Duration::from_millis(400),
        });
        let started = Instant::now();
        assert_eq!(round_trip(&mut client, b"slow").await, b"slow");
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn only_loopback_is_a_target() {
        let far: SocketAddr = "192.0.2.1:5432".parse().unwrap();
        assert!(FaultProxy::start(far).await.is_err());
    }
}
