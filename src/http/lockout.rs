//! Wrong operator tokens, counted per client address.
//!
//! The operator token opens everything and is chosen by the operator, so it
//! may be guessable. An address that sends `TASKQ_OPERATOR_WRONG_TOKENS`
//! (default [`DEFAULT_WRONG_TOKENS`]) wrong tokens, as a bearer token or
//! through the operator page's sign-in form, is then refused every operator
//! request for as long as its bucket holds no new try (one a minute): 429
//! with `Retry-After`, the right token included. Refusing the right token
//! too is what makes the limit bind: a guesser who was only refused the
//! wrong ones would still get in on the right guess. A request without a
//! token guesses nothing and is not counted.
//!
//! IPv6 addresses count by their /64, which one host commonly holds whole.
//! Behind a reverse proxy every client would share the proxy's address, and
//! so its budget: one guesser would lock the operator out. A proxy named in
//! `TASKQ_TRUSTED_PROXIES` is believed about the client it forwards for
//! (`X-Forwarded-For`); from any other peer that header is ignored, so a
//! client cannot escape its count by writing one.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRef, FromRequestParts};
use axum::http::request::Parts;
use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota};
use ipnet::IpNet;
use subtle::ConstantTimeEq;

use super::AppState;

/// Wrong tokens an address may send before it is refused.
pub const DEFAULT_WRONG_TOKENS: u32 = 10;
/// Keys kept by the failure buckets before the idle ones are dropped.
const TRACKED_ADDRESSES: usize = 4096;

/// Why an operator credential was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// No token, or not the operator's.
    WrongToken,
    /// The address sent too many wrong tokens; it may try again after
    /// this many seconds.
    TooMany { retry_after: u64 },
}

/// The failure buckets and the addresses refused now.
pub struct OperatorAttempts {
    /// `None`: wrong tokens are not counted.
    wrong: Option<DefaultKeyedRateLimiter<IpAddr>>,
    refused_until: Mutex<HashMap<IpAddr, Instant>>,
    proxies: TrustedProxies,
}

impl OperatorAttempts {
    /// Refuses an address after `wrong_tokens` wrong tokens; 0 never does.
    pub fn new(wrong_tokens: u32) -> Self {
        let quota = NonZeroU32::new(wrong_tokens)
            .map(|n| Quota::per_minute(NonZeroU32::MIN).allow_burst(n));
        Self {
            wrong: quota.map(DefaultKeyedRateLimiter::keyed),
            refused_until: Mutex::default(),
            proxies: TrustedProxies::default(),
        }
    }

    /// Believes `proxies` about the clients they forward for.
    pub fn trusting(mut self, proxies: TrustedProxies) -> Self {
        self.proxies = proxies;
        self
    }

    /// The address a request counts under: its connection's peer, or the
    /// client a trusted proxy names.
    pub fn client_of(&self, parts: &Parts) -> Option<IpAddr> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip())?;
        let forwarded = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .map(|v| v.to_str().unwrap_or(""));
        Some(self.proxies.client(peer, forwarded))
    }

    /// Checks `given` against the operator token for a request from
    /// `client` (`None`: an address the server does not know, counted as one).
    pub fn check(
        &self,
        client: Option<IpAddr>,
        given: &str,
        expected: &str,
    ) -> Result<(), Refused> {
        let address = bucket_of(client);
        let now = Instant::now();
        {
            let mut refused = self.refused();
            match refused.get(&address) {
                Some(until) if *until > now => {
                    return Err(Refused::TooMany {
                        retry_after: whole_seconds(*until - now),
                    })
                }
                Some(_) => {
                    refused.remove(&address);
                }
                None => {}
            }
        }
        if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
            return Ok(());
        }
        let Some(wrong) = self.wrong.as_ref().filter(|_| !given.is_empty()) else {
            return Err(Refused::WrongToken);
        };
        if wrong.len() > TRACKED_ADDRESSES {
            wrong.retain_recent();
        }
        let Err(not_until) = wrong.check_key(&address) else {
            return Err(Refused::WrongToken);
        };
        let wait = not_until.wait_time_from(wrong.clock().now());
        tracing::warn!(
            %address,
            retry_after_secs = whole_seconds(wait),
            "too many wrong operator tokens from one address: its operator requests are refused"
        );
        let mut refused = self.refused();
        refused.retain(|_, until| *until > now);
        refused.insert(address, now + wait);
        Err(Refused::TooMany {
            retry_after: whole_seconds(wait),
        })
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Instant>> {
        self.refused_until
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The key an address counts under: itself, or its /64 for IPv6.
fn bucket_of(client: Option<IpAddr>) -> IpAddr {
    match client.map(|ip| ip.to_canonical()) {
        Some(IpAddr::V6(v6)) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        Some(v4) => v4,
        None => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Seconds to wait, rounded up, at least one.
fn whole_seconds(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// Reverse proxies whose `X-Forwarded-For` names the client
/// (`TASKQ_TRUSTED_PROXIES`: addresses or networks, comma-separated).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl std::str::FromStr for TrustedProxies {
    type Err = String;

    fn from_str(list: &str) -> Result<Self, String> {
        list.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.parse::<IpNet>()
                    .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| {
                        format!("{item:?} in TASKQ_TRUSTED_PROXIES is not an IP address or network (a.b.c.d/n)")
                    })
            })
            .collect::<Result<_, _>>()
            .map(TrustedProxies)
    }
}

impl TrustedProxies {
    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client behind `peer`: `peer` itself unless it is trusted; then
    /// the nearest address in `X-Forwarded-For` (its values in order, read
    /// from the right) that is not a trusted proxy. A value that does not
    /// parse ends the walk at the last trusted hop: what lies beyond it
    /// was written by someone the server does not believe.
    fn client<'a>(
        &self,
        peer: IpAddr,
        forwarded: impl DoubleEndedIterator<Item = &'a str>,
    ) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        let mut client = peer;
        for hop in forwarded.flat_map(|v| v.split(',')).rev() {
            match hop.trim().parse::<IpAddr>() {
                Ok(ip) if self.trusts(ip) => client = ip,
                Ok(ip) => return ip,
                Err(_) => break,
            }
        }
        client
    }
}

/// The address a request counts under (see [`OperatorAttempts::client_of`]),
/// for handlers that check the operator token themselves (the sign-in form).
pub struct Client(pub Option<IpAddr>);

impl<S> FromRequestParts<S> for Client
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Client(
            AppState::from_ref(state).operator_attempts.client_of(parts),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "the-operator-token";

    #[test]
    fn an_address_is_refused_after_its_burst_of_wrong_tokens_even_with_the_right_one() {
        let attempts = OperatorAttempts::new(DEFAULT_WRONG_TOKENS);
        let guesser = Some(IpAddr::from([203, 0, 113, 7]));
        for _ in 0..DEFAULT_WRONG_TOKENS {
            assert_eq!(
                attempts.check(guesser, "guess", TOKEN),
                Err(Refused::WrongToken)
            );
        }
        let Err(Refused::TooMany { retry_after }) = attempts.check(guesser, "guess", TOKEN) else {
            panic!("the burst was not enforced");
        };
        assert!((1..=60).contains(&retry_after), "{retry_after}");
        assert!(matches!(
            attempts.check(guesser, TOKEN, TOKEN),
            Err(Refused::TooMany { .. })
        ));
        // Another address is not affected.
        assert_eq!(
            attempts.check(Some(IpAddr::from([203, 0, 113, 8])), TOKEN, TOKEN),
            Ok(())
        );
    }

    #[test]
    fn the_right_token_and_a_missing_one_spend_nothing() {
        let attempts = OperatorAttempts::new(DEFAULT_WRONG_TOKENS);
        let peer = Some(IpAddr::from([198, 51, 100, 1]));
        for _ in 0..3 * DEFAULT_WRONG_TOKENS {
            assert_eq!(attempts.check(peer, TOKEN, TOKEN), Ok(()));
            assert_eq!(attempts.check(peer, "", TOKEN), Err(Refused::WrongToken));
        }
    }

    #[test]
    fn zero_counts_nothing() {
        let attempts = OperatorAttempts::new(0);
        let peer = Some(IpAddr::from([198, 51, 100, 2]));
        for _ in 0..3 * DEFAULT_WRONG_TOKENS {
            assert_eq!(
                attempts.check(peer, "guess", TOKEN),
                Err(Refused::WrongToken)
            );
        }
        assert_eq!(attempts.check(peer, TOKEN, TOKEN), Ok(()));
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(bucket_of(Some(a)), bucket_of(Some(b)));
        assert_ne!(bucket_of(Some(a)), bucket_of(Some(c)));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(bucket_of(Some(mapped)), IpAddr::from([192, 0, 2, 1]));
    }

    fn client(proxies: &str, peer: &str, forwarded: &[&str]) -> IpAddr {
        let proxies: TrustedProxies = proxies.parse().unwrap();
        proxies.client(peer.parse().unwrap(), forwarded.iter().copied())
    }

    #[test]
    fn only_a_trusted_proxy_is_believed_about_the_client() {
        let lan = "10.0.0.0/8, 192.0.2.1";
        // An untrusted peer is the client, whatever it writes.
        assert_eq!(
            client(lan, "203.0.113.5", &["198.51.100.7"]),
            "203.0.113.5".parse::<IpAddr>().unwrap()
        );
        // A trusted one names it; trusted hops nearer the server are skipped,
        // and what a client prepended beyond the first untrusted hop is not read.
        assert_eq!(
            client(lan, "10.1.2.3", &["1.1.1.1, 198.51.100.7", "10.9.9.9"]),
            "198.51.100.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client(lan, "192.0.2.1", &["198.51.100.8"]),
            "198.51.100.8".parse::<IpAddr>().unwrap()
        );
        // No header, or nothing but trusted hops: the farthest trusted hop.
        assert_eq!(
            client(lan, "10.1.2.3", &[]),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client(lan, "10.1.2.3", &["10.4.4.4"]),
            "10.4.4.4".parse::<IpAddr>().unwrap()
        );
        // Garbage stops the walk at the last hop the server believes.
        assert_eq!(
            client(lan, "10.1.2.3", &["198.51.100.7, unknown"]),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
        // Nothing trusted: the header is never read.
        assert_eq!(
            client("", "10.1.2.3", &["198.51.100.7"]),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn trusted_proxies_parse_addresses_and_networks() {
        let parsed: TrustedProxies = " 10.0.0.0/8 ,::1, fd00::/8,".parse().unwrap();
        assert_eq!(parsed.0.len(), 3);
        assert!(parsed.trusts("10.200.0.1".parse().unwrap()));
        assert!(parsed.trusts("::ffff:10.0.0.1".parse().unwrap()));
        assert!(parsed.trusts("::1".parse().unwrap()));
        assert!(!parsed.trusts("::2".parse().unwrap()));
        assert!(!parsed.trusts("11.0.0.1".parse().unwrap()));
        let empty: TrustedProxies = "".parse().unwrap();
        assert_eq!(empty, TrustedProxies::default());
        let err = "10.0.0.0/33".parse::<TrustedProxies>().unwrap_err();
        assert!(err.contains("10.0.0.0/33"), "{err}");
        assert!("proxy.local".parse::<TrustedProxies>().is_err());
    }

    #[test]
    fn waits_round_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(59)), 59);
        assert_eq!(whole_seconds(Duration::from_millis(59_001)), 60);
    }
}
