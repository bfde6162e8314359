//! A real nginx (Debian's package `nginx`; `.ci/run` installs it) in front of a test's warren,
//! serving it at `/warren/`. Each test starts its own from a configuration in a temporary
//! directory (pid file, logs and temp files there too, on a free port); the system service is
//! never touched. A missing nginx fails the test, never skips it.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::wait_for;

/// How nginx hands requests for `/warren/...` to warren.
#[derive(Debug, Clone, Copy)]
pub enum Style {
    /// `proxy_pass http://warren/;`: warren gets `/queues`.
    StripsPrefix,
    /// `proxy_pass http://warren;`: warren gets `/warren/queues`.
    KeepsPrefix,
}

/// An nginx process, killed on drop.
pub struct Nginx {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if let Err(e) = self.child.kill() {
            eprintln!("could not stop nginx: {e}");
        }
        let _reaped = self.child.wait();
    }
}

/// A free local port for nginx to listen on (nginx needs the number in its configuration).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Nginx {
    /// Starts nginx on `port`, proxying `/warren/` to `warren` in `style`, and waits until it
    /// answers.
    pub async fn start(port: u16, warren: SocketAddr, style: Style) -> Nginx {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().display().to_string();
        let upstream = match style {
            Style::StripsPrefix => format!("http://{warren}/"),
            Style::KeepsPrefix => format!("http://{warren}"),
        };
        // `master_process off`: one process, as the user running the test; a master started as
        // root would hand requests to workers running as `nobody`, who cannot write the temp dir.
        let config = format!(
            "daemon off;\nmaster_process off;\npid {root}/nginx.pid;\nerror_log {root}/error.log warn;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n\
               access_log {root}/access.log;\n\
               client_body_temp_path {root}/body;\n  proxy_temp_path {root}/proxy;\n\
               fastcgi_temp_path {root}/fastcgi;\n  uwsgi_temp_path {root}/uwsgi;\n  scgi_temp_path {root}/scgi;\n\
               server {{\n\
                 listen 127.0.0.1:{port};\n\
                 location /warren/ {{\n\
                   proxy_pass {upstream};\n\
                   proxy_set_header Host $http_host;\n\
                   proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n\
                   proxy_set_header X-Forwarded-Proto $scheme;\n\
                 }}\n\
               }}\n\
             }}\n"
        );
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config).unwrap();
        let binary = std::env::var("NGINX").unwrap_or_else(|_| "/usr/sbin/nginx".to_string());
        let child = Command::new(&binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary} (apt-get install nginx): {e}"));
        let mut nginx = Nginx { child, port, dir };
        wait_for("nginx to listen", Duration::from_secs(20), || {
            let exited = nginx.child.try_wait().ok().flatten();
            let log = nginx.error_log();
            async move {
                if let Some(status) = exited {
                    panic!("nginx exited with {status}: {log}");
                }
                tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map(|_| ()).map_err(|e| e.to_string())
            }
        })
        .await;
        nginx
    }

    /// `path` (starting with `/warren/`) at nginx.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}
