//! Helpers of the tests that start `tern up` as a user would.

use std::process::Child;
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `tern up`, stopped (SIGINT, as a user's Ctrl-C) when dropped, also when the test fails.
pub struct Up(pub Child);

impl Drop for Up {
    fn drop(&mut self) {
        // SAFETY: signals a child process this test started.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGINT);
        }
        let until = Instant::now() + Duration::from_secs(30);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
