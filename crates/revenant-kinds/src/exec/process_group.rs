//! The process group an `exec` command runs in, and how it is stopped.
//!
//! The command is spawned with `process_group(0)`: its pid is the group's id, and every
//! process it starts stays in the group unless it leaves on purpose. Signalling the
//! group (`killpg`) reaches them all, which signalling the command alone would not: a
//! shell script killed on timeout would leave its `sleep`, `curl` or `ffmpeg` running.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::Child;

/// A running command's process group. Dropping it sends SIGKILL to the group: when the
/// runtime drops an attempt (its timeout, a lost lease, shutdown), nothing the command
/// started outlives it.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: Option<Pid>,
}

impl ProcessGroup {
    /// The group led by `child`, spawned with `process_group(0)`.
    pub(crate) fn of(child: &Child) -> Self {
        // `id()` is `None` only once the child was reaped, which cannot have happened
        // yet; pids fit in an i32 on every Unix.
        ProcessGroup {
            pgid: child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .map(Pid::from_raw),
        }
    }

    /// Sends `signal` to every process in the group. A group that is already empty is
    /// not an error.
    fn signal(&self, signal: Signal) {
        let Some(pgid) = self.pgid else { return };
        match killpg(pgid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(err) => {
                tracing::warn!(pgid = pgid.as_raw(), signal = %signal, error = %err, "exec kind: could not signal the process group")
            }
        }
    }

    /// SIGKILL to whatever is left in the group.
    fn kill(&self) {
        self.signal(Signal::SIGKILL);
    }

    /// SIGKILL to whatever is left in the group, once the command itself has ended,
    /// and forget the group: its id may be reused once it is empty, so it is signalled
    /// no more (not even on drop).
    pub(crate) fn kill_remaining(&mut self) {
        self.kill();
        self.pgid = None;
    }

    /// Stops the group: SIGTERM, up to `grace` for the command to exit, then SIGKILL.
    /// Returns what was done, for the error message.
    pub(crate) async fn stop(&self, child: &mut Child, grace: Duration) -> String {
        let pgid = self.pgid.map_or(0, Pid::as_raw);
        self.signal(Signal::SIGTERM);
        let exited = tokio::time::timeout(grace, child.wait()).await.is_ok();
        self.kill();
        if exited {
            // Still reap it if the wait above ended with an error.
            let _ = child.wait().await;
            format!("process group {pgid} stopped with SIGTERM")
        } else {
            let _ = child.wait().await;
            format!(
                "process group {pgid} ignored SIGTERM for {}, killed with SIGKILL",
                revenant_core::duration::format(grace)
            )
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `SIGKILL (9)`, or the bare number for a signal this platform does not name.
pub(crate) fn signal_name(signal: i32) -> String {
    match Signal::try_from(signal) {
        Ok(named) => format!("{} ({signal})", named.as_str()),
        Err(_) => format!("{signal}"),
    }
}
