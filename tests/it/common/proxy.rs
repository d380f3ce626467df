//! A TCP proxy a test controls, between a server and PostgreSQL: cut, it
//! closes every connection and drops new ones, as a database that went
//! away; restored, it forwards again.

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Forwards TCP to `target` until cut: then every connection is closed and
/// new ones are dropped at once, as a server that went away.
pub struct Proxy {
    pub addr: String,
    cut: watch::Sender<bool>,
}

impl Proxy {
    pub async fn start(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let (cut, watch) = watch::channel(false);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if *watch.borrow() {
                    continue;
                }
                let mut watch = watch.clone();
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = watch.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Proxy { addr, cut }
    }

    pub fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}
