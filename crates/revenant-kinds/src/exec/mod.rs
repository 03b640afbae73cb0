//! The `exec` kind: run one command in its own process group, and classify how it
//! ended.
//!
//! See [`ExecPayload`] for the payload and [`ExecHandler`] for what each ending means.

mod allow;
mod payload;
mod process_group;

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use revenant_core::duration;
use revenant_runtime::{Handler, JobContext, JobError};

use crate::excerpt::TailBuffer;
use allow::Allowed;
pub use allow::ExecConfigError;
pub use payload::ExecPayload;
use process_group::ProcessGroup;

/// How much of standard error goes into the error message.
const STDERR_TAIL_BYTES: usize = 2048;
/// How much of standard output is kept for the debug log.
const STDOUT_TAIL_BYTES: usize = 1024;
/// How long to wait for the pipes to close once the command has ended and its group
/// was killed. Only a process that left the group (`setsid`) and kept the pipe open can
/// make us wait this long; we then report what we have.
const PIPE_DRAIN: Duration = Duration::from_secs(1);

/// The exit code that means "try again later" (`EX_TEMPFAIL` in `sysexits.h`, the
/// convention of mail transfer agents since sendmail).
pub const EX_TEMPFAIL: i32 = 75;

/// Runs the `exec` kind's commands ([`ExecPayload`]).
///
/// The command runs directly (no shell) in a process group of its own, with the
/// payload on standard input and the worker's environment plus the payload's `env`
/// (only the variables the operator allows).
///
/// | ending | outcome |
/// | --- | --- |
/// | exit 0 | success |
/// | exit 75 (`EX_TEMPFAIL`) | retry |
/// | any other exit code (1, 2, 127 ...) | permanent |
/// | killed by a signal (an OOM kill, a crash) | retry, naming the signal |
/// | past its timeout, or the attempt cancelled | the whole process group gets SIGTERM, then SIGKILL after the grace; retry |
/// | the program does not exist or is not executable | permanent |
/// | a payload that fails its checks | permanent, naming the field |
/// | a command, variable or directory the worker does not allow | permanent, naming the field; nothing runs |
///
/// Error messages end with the last 2 KiB of standard error. Standard output is read
/// and dropped (its last 1 KiB is logged at `debug`). Anything the command leaves
/// running in its process group is killed when it exits; a process that escapes the
/// group (`setsid`, double fork into a new group) is beyond reach.
///
/// **Security:** a producer controls the payload entirely, so the handler decides
/// what it may change:
///
/// - the program: [`ExecHandler::allow`] limits the commands to a list (the
///   `revenant work` command always sets one), each resolved to one file when the
///   handler is configured; a command outside it is a permanent failure that runs
///   nothing. Without a list, no program runs. [`ExecHandler::allow_any`] lets any
///   program run: only for queues whose producers you trust as much as a shell on the
///   worker;
/// - the environment: a payload may set only the variables given to
///   [`ExecHandler::allow_env`] (default none), and never `PATH`, `LD_*` or `DYLD_*`;
/// - the working directory: a payload's `cwd` must be inside a directory given to
///   [`ExecHandler::allow_cwd`] (default none: `cwd` refused), after resolving `..`
///   and symbolic links;
/// - the arguments and standard input are the producer's: allow only programs that are
///   safe whatever arguments they get (`find -exec`, `git -c`, `sh -c`, interpreters
///   and `env` run anything), or a wrapper script that checks them.
///
/// The command inherits the worker's own environment: keep secrets the jobs should not
/// read out of it.
#[derive(Debug, Clone)]
pub struct ExecHandler {
    kill_grace: Duration,
    allowed: Allowed,
}

impl Default for ExecHandler {
    fn default() -> Self {
        ExecHandler {
            kill_grace: Self::DEFAULT_KILL_GRACE,
            allowed: Allowed::default(),
        }
    }
}

impl ExecHandler {
    /// The default time between SIGTERM and SIGKILL when a command is stopped: long
    /// enough to flush and remove temporary files, short enough not to hold a slot.
    pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

    /// A handler with the default kill grace ([`Self::DEFAULT_KILL_GRACE`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the time between SIGTERM and SIGKILL when a command is stopped. A
    /// command's timeout is cut so this grace fits before the attempt's own timeout;
    /// past that, the runtime drops the attempt and the group gets SIGKILL at once.
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// Lets a job run any program, looked up in the worker's `PATH` as the job writes
    /// it. Only for trusted producers (tests, a worker whose queues only your own code
    /// enqueues into): whoever can enqueue then has a shell on the worker. The
    /// environment and working-directory rules still hold. A later [`ExecHandler::allow`]
    /// goes back to a list.
    pub fn allow_any(mut self) -> Self {
        self.allowed.commands = None;
        self
    }

    /// Runs only these commands (adding to any given before). Default: none, so an
    /// `exec` job on a handler without a list is refused, naming the missing list.
    ///
    /// Each is resolved to one file now: a bare name (`convert`) in the worker's own
    /// `PATH`, a path made absolute against the worker's directory. A job names the
    /// command as written here, or by the absolute path it resolved to, and that file
    /// runs, whatever `PATH` or `cwd` the job would like. Refused when a command is not
    /// found or is not an executable file.
    pub fn allow<I, S>(mut self, commands: I) -> Result<Self, ExecConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let list = self.allowed.commands.get_or_insert_with(Default::default);
        for command in commands {
            let command = command.into();
            let path = allow::resolve_program(&command)?;
            list.insert(command, path);
        }
        Ok(self)
    }

    /// Lets jobs set these environment variables in their payload's `env` (adding to
    /// any given before). Default none: a job's `env` is refused. `PATH`, `LD_*` and
    /// `DYLD_*` are refused here: they choose which code runs.
    pub fn allow_env<I, S>(mut self, names: I) -> Result<Self, ExecConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for name in names {
            let name = allow::env_name(name.as_ref())?;
            self.allowed.env.insert(name);
        }
        Ok(self)
    }

    /// Lets jobs run in these directories, or below them (adding to any given before).
    /// Default none: a job's `cwd` is refused. Each must exist now; it is kept
    /// canonical, and a job's `cwd` is canonicalized (`..` and symbolic links
    /// resolved) before it is compared.
    pub fn allow_cwd<I, P>(mut self, dirs: I) -> Result<Self, ExecConfigError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<std::path::Path>,
    {
        for dir in dirs {
            let root = allow::cwd_root(dir.as_ref())?;
            if !self.allowed.cwd_roots.contains(&root) {
                self.allowed.cwd_roots.push(root);
            }
        }
        Ok(self)
    }

    /// How long the command may run: the payload's timeout, cut so that the SIGTERM
    /// grace still fits in the attempt (half the remaining time at most goes to it).
    fn limit(&self, ctx: &JobContext, requested: Option<Duration>) -> Duration {
        let remaining = ctx.remaining();
        let reserve = self.kill_grace.min(remaining / 2);
        let available = remaining.saturating_sub(reserve);
        requested.map_or(available, |r| r.min(available))
    }
}

/// How the wait for the command ended.
enum Ended {
    Exited(std::io::Result<ExitStatus>),
    TimedOut(Duration),
    Cancelled,
}

#[async_trait]
impl Handler for ExecHandler {
    const KIND: &'static str = "exec";
    type Payload = ExecPayload;

    async fn run(&self, ctx: JobContext, payload: ExecPayload) -> Result<(), JobError> {
        let file = self.allowed.program(&payload.command)?;
        let command = payload.validate()?;
        self.allowed.check_env(command.env.keys())?;
        let cwd = match &command.cwd {
            Some(cwd) => Some(self.allowed.check_cwd(cwd)?),
            None => None,
        };
        // Messages name the program as the job wrote it.
        let program = command.program.clone();
        let limit = self.limit(&ctx, command.timeout);

        let mut cmd = tokio::process::Command::new(&file);
        cmd.arg0(&command.program)
            .args(&command.args)
            .envs(&command.env)
            .stdin(if command.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so a timeout can stop the command and everything it
            // started, and a Ctrl-C on the worker's terminal does not reach it.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &cwd {
            cmd.current_dir(cwd);
        }
        let mut child = cmd.spawn().map_err(|err| spawn_error(&program, err))?;
        // From here on, dropping this future (the runtime cancels an attempt by
        // dropping it) kills the whole group.
        let mut group = ProcessGroup::of(&child);

        let stdin = child
            .stdin
            .take()
            .zip(command.stdin)
            .map(|(mut pipe, bytes)| {
                tokio::spawn(async move {
                    // A command that does not read its input is its own business:
                    // a broken pipe here is not a failure.
                    let _ = pipe.write_all(&bytes).await;
                })
            });
        let stderr = child
            .stderr
            .take()
            .map(|pipe| tokio::spawn(tail_of(pipe, STDERR_TAIL_BYTES)));
        let stdout = child
            .stdout
            .take()
            .map(|pipe| tokio::spawn(tail_of(pipe, STDOUT_TAIL_BYTES)));

        let ended = tokio::select! {
            status = child.wait() => Ended::Exited(status),
            () = tokio::time::sleep(limit) => Ended::TimedOut(limit),
            () = ctx.cancelled() => Ended::Cancelled,
        };
        let stop = match ended {
            Ended::Exited(_) => None,
            Ended::TimedOut(_) | Ended::Cancelled => {
                Some(group.stop(&mut child, self.kill_grace).await)
            }
        };
        // Whatever the command left behind in its group goes too, so that the pipes
        // close and no orphan outlives its job.
        group.kill_remaining();
        if let Some(task) = stdin {
            task.abort();
        }
        let stderr = collect(stderr).await;
        let stdout = collect(stdout).await;
        if !stdout.is_empty() {
            tracing::debug!(job_id = ctx.id(), program = %program, stdout = %stdout, "exec kind: standard output (tail)");
        }

        let with_stderr = |message: String| {
            if stderr.is_empty() {
                message
            } else {
                format!("{message}: {stderr}")
            }
        };
        match ended {
            Ended::Exited(Ok(status)) => classify(status, &program).map_err(|err| {
                let message = with_stderr(err.message().to_string());
                JobError::retry(message).into_action(err.action())
            }),
            Ended::Exited(Err(err)) => Err(JobError::retry(with_stderr(format!(
                "{program}: could not wait for the command: {err}"
            )))),
            Ended::TimedOut(limit) => Err(JobError::retry(with_stderr(format!(
                "{program} timed out after {}; {}",
                duration::format(limit),
                stop.unwrap_or_default()
            )))),
            Ended::Cancelled => Err(JobError::retry(with_stderr(format!(
                "{program}: attempt cancelled (attempt timeout, lost lease or shutdown); {}",
                stop.unwrap_or_default()
            )))),
        }
    }
}

/// The table above, for a command that ended by itself.
fn classify(status: ExitStatus, program: &str) -> Result<(), JobError> {
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(()),
        (Some(EX_TEMPFAIL), _) => Err(JobError::retry(format!(
            "{program} exited with {EX_TEMPFAIL} (EX_TEMPFAIL: try again later)"
        ))),
        (Some(code), _) => Err(JobError::permanent(format!("{program} exited with {code}"))),
        (None, Some(signal)) => {
            let core = if status.core_dumped() {
                ", core dumped"
            } else {
                ""
            };
            Err(JobError::retry(format!(
                "{program} was killed by signal {}{core}",
                process_group::signal_name(signal)
            )))
        }
        (None, None) => Err(JobError::retry(format!(
            "{program} ended without an exit code or a signal ({status})"
        ))),
    }
}

fn spawn_error(program: &str, err: std::io::Error) -> JobError {
    use std::io::ErrorKind;
    match err.kind() {
        ErrorKind::NotFound => JobError::permanent(format!(
            "{program}: command not found (not a file, and not in the worker's PATH)"
        )),
        ErrorKind::PermissionDenied => {
            JobError::permanent(format!("{program}: permission denied (not executable?)"))
        }
        // Out of processes or file descriptors: the worker's trouble, not the job's.
        _ => JobError::retry(format!("{program}: could not start: {err}")),
    }
}

/// Reads a pipe to its end, keeping the last `cap` bytes.
async fn tail_of(mut pipe: impl AsyncRead + Unpin, cap: usize) -> String {
    let mut tail = TailBuffer::new(cap);
    let mut chunk = vec![0u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => tail.push(&chunk[..n]),
        }
    }
    tail.text()
}

/// The text a reader task gathered, waiting at most [`PIPE_DRAIN`] for the pipe to
/// close.
async fn collect(task: Option<tokio::task::JoinHandle<String>>) -> String {
    let Some(mut task) = task else {
        return String::new();
    };
    match tokio::time::timeout(PIPE_DRAIN, &mut task).await {
        Ok(Ok(text)) => text,
        Ok(Err(_)) => String::new(),
        Err(_) => {
            task.abort();
            "(output still open after the command ended; not read)".to_string()
        }
    }
}
