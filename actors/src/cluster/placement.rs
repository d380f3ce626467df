//! The placement rule, apart from what it reads: the consistent-hash ring
//! nginx's `hash $org consistent;` builds over the live nodes, and where a
//! request for an org goes. Pure, so every node computes the same answer
//! and the tests need no database.
//!
//! The ring is nginx's own (ngx_http_upstream_hash_module, after
//! Cache::Memcached::Fast's ketama): 160 points per server of weight 1, the
//! points of a server named `host:port` being the CRC32s of `host`, a NUL,
//! `port` and the previous point's CRC32 (little-endian, 0 at first); a
//! key goes to the first point at or after its CRC32, wrapping. A node is
//! named by its advertise URL's `host:port`, as the operator writes it in
//! nginx's `server` line, and an org by its id's 32 hex digits, as the
//! balancer reads them from the API key: so the node nginx sends an org's
//! requests to is the node that owns the org, and none is forwarded.

use crate::domain::OrgId;

/// Points on the ring per node (nginx's, for a server of weight 1).
const POINTS_PER_NODE: u32 = 160;

/// Where a request for an org is to be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Here: this node owns the org, or may take it.
    Here,
    /// At another live node's advertise URL.
    At(String),
    /// Nowhere now: the org is moving; retry shortly.
    Moving,
}

/// A live node as this node last saw the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveNode {
    pub node_id: String,
    pub url: String,
    /// Where clients may reach it directly, if its operator named a URL.
    pub public_url: Option<String>,
    /// It is stopping: no org is chosen for it.
    pub leaving: bool,
    /// Heartbeats of this node in a row that it was seen live at: orgs
    /// move to a node only once it has settled.
    pub beats: u32,
}

/// The ring over some live nodes: each org's choice moves only when its
/// chosen node leaves or a node whose point comes first joins.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    nodes: Vec<LiveNode>,
    /// Each point's hash and its node's index, sorted, one per hash.
    points: Vec<(u32, usize)>,
}

impl Ring {
    pub fn new(nodes: impl IntoIterator<Item = LiveNode>) -> Ring {
        let mut nodes: Vec<LiveNode> = nodes.into_iter().collect();
        // By name, so that an index orders points as names would.
        nodes.sort_by(|a, b| server_name(&a.url).cmp(server_name(&b.url)));
        let mut points = Vec::with_capacity(nodes.len() * POINTS_PER_NODE as usize);
        for (i, node) in nodes.iter().enumerate() {
            let (host, port) = host_port(server_name(&node.url));
            let mut base = crc32fast::Hasher::new();
            base.update(host.as_bytes());
            base.update(&[0]);
            base.update(port.as_bytes());
            let mut prev: u32 = 0;
            for _ in 0..POINTS_PER_NODE {
                let mut point = base.clone();
                point.update(&prev.to_le_bytes());
                prev = point.finalize();
                points.push((prev, i));
            }
        }
        // nginx keeps one point per hash too; which node a collision keeps
        // is its sort's (about once in 40,000 rings of three): the name
        // decides here, so at least every node agrees.
        points.sort_unstable();
        points.dedup_by_key(|p| p.0);
        Ring { nodes, points }
    }

    /// Whether the ring is over these nodes (by id and address), in any
    /// order: if not, it is built again.
    pub fn is_over(&self, nodes: &[LiveNode]) -> bool {
        nodes.len() == self.nodes.len()
            && nodes.iter().all(|n| {
                self.nodes
                    .iter()
                    .any(|m| m.node_id == n.node_id && m.url == n.url)
            })
    }

    /// The node the org's requests go to.
    pub fn owner(&self, org: OrgId) -> Option<&LiveNode> {
        let mut hex = [0u8; 32];
        let key = org.0.simple().encode_lower(&mut hex);
        let hash = crc32fast::hash(key.as_bytes());
        let at = self.points.partition_point(|p| p.0 < hash);
        let (_, node) = self.points.get(at).or_else(|| self.points.first())?;
        Some(&self.nodes[*node])
    }
}

/// A node's name on the ring: its advertise URL less the scheme and any
/// path, as nginx's `server` line names it (`10.0.0.1:8080`).
fn server_name(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?', '#']).next().unwrap_or(rest)
}

/// The host and the port of a server's name, split as nginx splits it: at
/// the last `:` followed by digits only; no port when there is none.
fn host_port(name: &str) -> (&str, &str) {
    match name.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => (host, port),
        _ => (name, ""),
    }
}

/// Where a request for an org goes, once its owner is not this node (or
/// is this node after it lost the org): the rule, apart from what it reads.
/// `owner` is its row's live node, if any; `chosen` the node the ring
/// picks; `can_take` whether this node may take orgs (its trust
/// window is open and it is not leaving); `forwarded` whether another
/// node sent the request here.
pub fn placement(
    me: &str,
    owner: Option<&LiveNode>,
    chosen: Option<&LiveNode>,
    can_take: bool,
    forwarded: bool,
) -> Placement {
    match owner {
        Some(o) if o.node_id == me && can_take => Placement::Here,
        Some(o) if o.node_id == me => Placement::Moving,
        // A forwarded request is never forwarded again.
        Some(_) if forwarded => Placement::Moving,
        Some(o) => Placement::At(o.url.clone()),
        // Nobody live owns it: the chosen node takes it, or this one when
        // it was sent here (the sender chose it) or no node is chosen.
        None => match chosen {
            _ if can_take && forwarded => Placement::Here,
            None if can_take => Placement::Here,
            Some(c) if c.node_id == me && can_take => Placement::Here,
            Some(c) if c.node_id != me && !forwarded => Placement::At(c.url.clone()),
            _ => Placement::Moving,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<LiveNode> {
        (0..n)
            .map(|i| LiveNode {
                node_id: format!("node-{i}"),
                url: format!("http://10.0.0.{i}:8080"),
                public_url: None,
                leaving: false,
                beats: 1,
            })
            .collect()
    }

    #[test]
    fn a_request_goes_to_the_owner_or_the_chosen_node_and_is_forwarded_once() {
        let n = nodes(2);
        let (me, other) = (&n[0], &n[1]);
        let at = |node: &LiveNode| Placement::At(node.url.clone());
        // A live owner: here if it is this node and it may act.
        assert_eq!(
            placement("node-0", Some(me), None, true, false),
            Placement::Here
        );
        assert_eq!(
            placement("node-0", Some(me), None, false, false),
            Placement::Moving
        );
        assert_eq!(
            placement("node-0", Some(other), None, true, false),
            at(other)
        );
        assert_eq!(
            placement("node-0", Some(other), None, true, true),
            Placement::Moving
        );
        // Nobody owns it: the chosen node takes it.
        assert_eq!(
            placement("node-0", None, Some(me), true, false),
            Placement::Here
        );
        assert_eq!(
            placement("node-0", None, Some(other), true, false),
            at(other)
        );
        // Sent here by a node that chose this one: taken, never sent on.
        assert_eq!(
            placement("node-0", None, Some(other), true, true),
            Placement::Here
        );
        assert_eq!(
            placement("node-0", None, Some(other), false, true),
            Placement::Moving
        );
        // A node that may not take orgs sends them to the chosen one.
        assert_eq!(
            placement("node-0", None, Some(other), false, false),
            at(other)
        );
        assert_eq!(
            placement("node-0", None, Some(me), false, false),
            Placement::Moving
        );
        assert_eq!(
            placement("node-0", None, None, true, false),
            Placement::Here
        );
        assert_eq!(
            placement("node-0", None, None, false, false),
            Placement::Moving
        );
    }

    fn ring_of<'a>(nodes: impl IntoIterator<Item = &'a LiveNode>) -> Ring {
        Ring::new(nodes.into_iter().cloned())
    }

    #[test]
    fn the_ring_spreads_orgs_and_moves_only_those_of_a_node_that_leaves() {
        let three = nodes(3);
        let orgs: Vec<OrgId> = (0..3000).map(|_| OrgId::new_v7()).collect();
        let ring = ring_of(&three);
        let before: Vec<&str> = orgs
            .iter()
            .map(|o| ring.owner(*o).unwrap().node_id.as_str())
            .collect();
        for node in &three {
            let share = before.iter().filter(|n| **n == node.node_id).count();
            assert!(
                (600..1400).contains(&share),
                "{} owns {share}",
                node.node_id
            );
        }
        let two = ring_of(&three[..2]);
        for (org, was) in orgs.iter().zip(&before) {
            let now = two.owner(*org).unwrap();
            if *was != "node-2" {
                assert_eq!(now.node_id, *was, "an org of a staying node moved");
            }
        }
        assert!(Ring::default().owner(orgs[0]).is_none());
        let mut reversed = three.clone();
        reversed.reverse();
        assert!(ring.is_over(&reversed) && !ring.is_over(&three[..2]));
        assert!(!two.is_over(&nodes(3)[1..]));
        // A node that joins takes orgs from the others and gives none.
        let four = ring_of(&nodes(4));
        for (org, was) in orgs.iter().zip(&before) {
            let now = &four.owner(*org).unwrap().node_id;
            assert!(
                now == was || now == "node-3",
                "{org:?} moved from {was} to {now}"
            );
        }
    }

    #[test]
    fn every_node_computes_the_same_choice() {
        let org: OrgId = "01a220d0-501a-703e-a721-779f23eb694e".parse().unwrap();
        let mut shuffled = nodes(5);
        let first = ring_of(&shuffled).owner(org).unwrap().clone();
        shuffled.reverse();
        assert_eq!(ring_of(&shuffled).owner(org).unwrap(), &first);
        // Only the URL's host and port name a node.
        let mut renamed = nodes(5);
        for n in &mut renamed {
            n.url.push_str("/ignored?x");
        }
        assert_eq!(ring_of(&renamed).owner(org).unwrap().node_id, first.node_id);
    }

    /// Which of `server 127.0.0.1:18081; server 127.0.0.1:18082; server
    /// 127.0.0.1:18083;` nginx 1.22 (`hash $org consistent;`) sent each org
    /// to, then with the second server gone: read from a real nginx.
    const NGINX: [(&str, u16, u16); 24] = [
        ("9af4974096f5b0ee5e2502420ae59635", 3, 3),
        ("523b7841839dc54e399029b404f18db9", 3, 3),
        ("fbf047634a4d9d417a343f8dfa057b26", 1, 1),
        ("d55abb44a2d2f0416fe1ba56f96678d0", 2, 3),
        ("ddb3e9570509225a60c2e6a3e24cfa40", 3, 3),
        ("e991c9548446b9e52a539dccbc532a3d", 2, 3),
        ("65ef814760c3454a5f71aada9ab664e7", 3, 3),
        ("e1cb9068a7c0350e1bdc447afa1aed9f", 2, 3),
        ("7c5b8488aee8a14495c26ff8b9bf7bcb", 3, 3),
        ("a5c83846d03c199d4111b92d8bde68de", 3, 3),
        ("247c2a1690b5936923ae1c399dc3c7eb", 3, 3),
        ("fe4882698e6a7306615d529123b14604", 1, 1),
        ("ef2a6b129616c0ebd020d033278a3a9e", 3, 3),
        ("2d42cc5fc3301bc682cd689a6d2d5932", 3, 3),
        ("935b5f3d5d7476ab6e3edbb296e7b86e", 1, 1),
        ("3cc2fb113840f0cb83f39d8d84a494b9", 1, 1),
        ("4757294bdafa6f74e6ac9ef9fb4c7b30", 1, 1),
        ("6a4adaa337b754d1ab6dd4db6533e29b", 2, 3),
        ("7525e32ca367f65503494e6f723a1c65", 1, 1),
        ("636afcb6f0f447bc0520f3ce721a0c8e", 2, 1),
        ("704b30fc5764cb629e0a3ffd0cfc99b9", 3, 3),
        ("b5985fe00bab3e80c2c2b0508443681b", 1, 1),
        ("05f3063992881b9f8c147a6c775ea592", 3, 3),
        ("4caabaccfe6f59d90019211b4dcb932c", 2, 1),
    ];

    #[test]
    fn the_ring_is_the_one_nginx_builds() {
        let node = |port: u16| LiveNode {
            node_id: format!("node-{port}"),
            url: format!("http://127.0.0.1:1808{port}"),
            public_url: None,
            leaving: false,
            beats: 1,
        };
        let three = ring_of(&[node(1), node(2), node(3)]);
        let two = ring_of(&[node(1), node(3)]);
        for (hex, with_three, with_two) in NGINX {
            let org = OrgId(uuid::Uuid::try_parse(hex).unwrap());
            assert_eq!(three.owner(org).unwrap(), &node(with_three), "{hex}");
            assert_eq!(two.owner(org).unwrap(), &node(with_two), "{hex}");
        }
        assert_eq!(host_port("10.0.0.1:8080"), ("10.0.0.1", "8080"));
        assert_eq!(host_port("[::1]:8080"), ("[::1]", "8080"));
        assert_eq!(host_port("taskq-0"), ("taskq-0", ""));
        assert_eq!(server_name("https://taskq-0:8443/"), "taskq-0:8443");
    }
}
