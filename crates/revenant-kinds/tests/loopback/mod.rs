//! A tiny HTTP/1.1 server on 127.0.0.1 for the `http` kind's tests: it records every
//! request and answers from a closure, one request per connection.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the server received it. Header names are lowercase.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the server answers.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Waits this long before answering (a slow provider).
    pub delay: Duration,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Reply {
            status,
            ..Reply::default()
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// A running server. It stops when the test's runtime does.
pub struct Server {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Server {
    /// Starts a server on 127.0.0.1 (a free port) answering with `reply`.
    pub async fn start(reply: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let reply = Arc::new(reply);
        let log = received.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let log = log.clone();
                let reply = reply.clone();
                tokio::spawn(async move {
                    let mut stream = stream;
                    // A client that hangs up early (a timeout test) is not our failure.
                    let _ = read_request(&mut stream, &log, &*reply).await;
                });
            }
        });
        Server { addr, received }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// A port on 127.0.0.1 with nothing listening: bound, then released.
pub async fn dead_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

async fn read_request(
    stream: &mut TcpStream,
    log: &Mutex<Vec<Received>>,
    reply: &(dyn Fn(&Received) -> Reply + Send + Sync),
) -> Option<()> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_string();
    let path = request_line.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let request = Received {
        method,
        path,
        headers,
        body,
    };
    log.lock().unwrap().push(request.clone());

    let answer = reply(&request);
    tokio::time::sleep(answer.delay).await;
    let mut out = format!("HTTP/1.1 {} Test\r\n", answer.status);
    for (name, value) in &answer.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        answer.body.len()
    ));
    stream.write_all(out.as_bytes()).await.ok()?;
    stream.write_all(&answer.body).await.ok()?;
    stream.shutdown().await.ok()?;
    Some(())
}
