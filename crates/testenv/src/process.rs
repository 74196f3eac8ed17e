//! Child processes that cannot outlive the process that started them.
//!
//! A test that panics unwinds and drops its environment, which kills the children. A test
//! binary that exits without dropping (a shared environment lives in a static) or is killed
//! outright must not leak an API server either, so every child is started with
//! `PR_SET_PDEATHSIG = SIGKILL`. That signal is tied to the *thread* that forked the child,
//! not the process, so all children are forked by one spawner thread that lives as long as
//! the process does.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

type Request = (Command, Sender<io::Result<Child>>);

fn spawner() -> &'static Mutex<Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<Sender<Request>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = channel::<Request>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(spawn_here(&mut cmd));
                }
                // The sender lives in a static, so this loop only ends with the process;
                // park instead of returning, which would kill every child.
                loop {
                    std::thread::park();
                }
            })
            .expect("the testenv spawner thread starts");
        Mutex::new(tx)
    })
}

fn spawn_here(cmd: &mut Command) -> io::Result<Child> {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only makes two
    // async-signal-safe calls (prctl, getppid); it allocates nothing and takes no locks.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then nobody will signal us.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::other("the parent exited during spawn"));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// A running child; dropping it kills and reaps it.
pub struct Guarded {
    pub name: &'static str,
    child: Child,
}

impl Guarded {
    pub fn spawn(name: &'static str, cmd: Command) -> io::Result<Guarded> {
        let (tx, rx) = channel();
        spawner()
            .lock()
            .map_err(|_| io::Error::other("the testenv spawner is poisoned"))?
            .send((cmd, tx))
            .map_err(|_| io::Error::other("the testenv spawner thread is gone"))?;
        let child = rx
            .recv()
            .map_err(|_| io::Error::other("the testenv spawner thread did not answer"))??;
        Ok(Guarded { name, child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status text)` when the process has already exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown ({e})")),
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let _ = self.child.kill();
        // Reap it so no zombie stays behind; SIGKILL makes this quick.
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.wait();
    }
}

/// Whether a process with this pid is running. A zombie (exited, not yet reaped by
/// whoever inherited it) counts as gone.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}
