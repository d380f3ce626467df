//! The placement rule, apart from what it reads: rendezvous hashing over
//! the live nodes, and where a request for an org goes. Pure, so every
//! node computes the same answer and the tests need no database.

use crate::domain::OrgId;

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
    /// It is stopping: no org is chosen for it.
    pub leaving: bool,
    /// Heartbeats of this node in a row that it was seen live at: orgs
    /// move to a node only once it has settled.
    pub beats: u32,
}

/// The node whose hash with the org is highest: each org's choice moves
/// only when its chosen node leaves or a node that beats it joins.
pub fn rendezvous<'a>(
    org: OrgId,
    nodes: impl IntoIterator<Item = &'a LiveNode>,
) -> Option<&'a LiveNode> {
    nodes
        .into_iter()
        .max_by_key(|n| (score(org, &n.node_id), &n.node_id))
}

/// Where a request for an org goes, once its owner is not this node (or
/// is this node after it lost the org): the rule, apart from what it reads.
/// `owner` is its row's live node, if any; `chosen` the node rendezvous
/// hashing picks; `can_take` whether this node may take orgs (its trust
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

/// FNV-1a over the org id and the node id, then a 64-bit finaliser
/// (splitmix64) so that nearby ids score far apart. Every node must compute
/// the same number, so no per-process seed.
fn score(org: OrgId, node: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in org.0.as_bytes().iter().chain(node.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<LiveNode> {
        (0..n)
            .map(|i| LiveNode {
                node_id: format!("node-{i}"),
                url: format!("http://10.0.0.{i}:8080"),
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

    #[test]
    fn rendezvous_spreads_orgs_and_moves_only_those_of_a_node_that_leaves() {
        let three = nodes(3);
        let orgs: Vec<OrgId> = (0..3000).map(|_| OrgId::new_v7()).collect();
        let before: Vec<&str> = orgs
            .iter()
            .map(|o| rendezvous(*o, &three).unwrap().node_id.as_str())
            .collect();
        for node in &three {
            let share = before.iter().filter(|n| **n == node.node_id).count();
            assert!(
                (800..1200).contains(&share),
                "{} owns {share}",
                node.node_id
            );
        }
        let two = &three[..2];
        for (org, was) in orgs.iter().zip(&before) {
            let now = rendezvous(*org, two).unwrap();
            if *was != "node-2" {
                assert_eq!(now.node_id, *was, "an org of a staying node moved");
            }
        }
        assert!(rendezvous(orgs[0], &[]).is_none());
        // A leaving node is no one's choice.
        let choosable = three.iter().filter(|n| n.node_id != "node-2");
        for (org, was) in orgs.iter().zip(&before).take(100) {
            let now = rendezvous(*org, choosable.clone()).unwrap();
            assert!(now.node_id != "node-2" && (*was == "node-2" || now.node_id == *was));
        }
    }

    #[test]
    fn every_node_computes_the_same_choice() {
        let org: OrgId = "01a220d0-501a-703e-a721-779f23eb694e".parse().unwrap();
        let mut shuffled = nodes(5);
        let first = rendezvous(org, &shuffled).unwrap().clone();
        shuffled.reverse();
        assert_eq!(rendezvous(org, &shuffled).unwrap(), &first);
        // A pinned value: no per-process seed, so every node computes it.
        assert_eq!(score(org, "node-1"), 0x96d8_2b0d_8820_793c);
    }
}
