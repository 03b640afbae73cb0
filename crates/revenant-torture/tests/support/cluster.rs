//! A private PostgreSQL cluster (initdb + pg_ctl) for the tests that stop, crash or
//! restart the server: never the shared test server, whose restart would break every
//! other test running against it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where a private cluster lives and how to drive it.
#[derive(Clone)]
pub struct Server {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
}

/// A private PostgreSQL cluster (initdb + pg_ctl, run as the `postgres` user when we
/// are root), stopped and removed on drop. Never the shared server: restarting that
/// would break every other test running against it. Same approach as
/// crates/revenant-postgres/tests/restart.rs.
pub struct Cluster(pub Server);

fn find_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .filter(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Runs a PostgreSQL binary, as the `postgres` user when we are root (initdb and the
/// server refuse to run as root).
fn run(bin: &Path, args: &[&str]) -> bool {
    let mut command = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    command
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Cluster {
    /// A started private cluster, or `None` when initdb/pg_ctl are missing or initdb
    /// fails.
    pub fn create() -> Option<Cluster> {
        let bin = find_bin()?;
        let dir = std::env::temp_dir().join(format!(
            "revenant-torture-pg-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).ok()?;
        if is_root() {
            Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status()
                .ok()?;
        }
        let data = dir.join("data");
        let ok = run(
            &bin.join("initdb"),
            &[
                "-D",
                data.to_str()?,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        );
        if !ok {
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
        let cluster = Cluster(Server {
            dir,
            bin,
            port: free_port(),
        });
        assert!(cluster.0.start(), "the private cluster starts");
        Some(cluster)
    }
}

impl Server {
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server and waits until it accepts connections (`pg_ctl -w`).
    pub fn start(&self) -> bool {
        let data = self.dir.join("data");
        let log = self.dir.join("server.log");
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        run(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap_or_default(),
                "-l",
                log.to_str().unwrap_or_default(),
                "-w",
                "-o",
                &options,
                "start",
            ],
        )
    }

    /// Stops the server (`fast`: disconnect everyone, roll back, shut down cleanly).
    pub fn stop(&self, mode: &str) -> bool {
        let data = self.dir.join("data");
        run(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap_or_default(),
                "-m",
                mode,
                "-w",
                "stop",
            ],
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.0.stop("immediate");
        let _ = std::fs::remove_dir_all(&self.0.dir);
    }
}
