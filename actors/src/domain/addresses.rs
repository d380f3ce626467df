//! Which addresses a webhook may reach (CONTRACT §7): public unicast ones.
//! Refused is every block of IANA's IPv4 and IPv6 special-purpose address
//! registries that is not globally reachable, multicast and broadcast, and
//! every IPv6 address outside the global unicast space (`2000::/3`); a
//! refusal names the kind of block, so whoever wrote the URL learns why.
//!
//! The blocks that carry an IPv4 address inside an IPv6 one (IPv4-mapped,
//! IPv4-compatible, NAT64, 6to4, Teredo) are refused whole, whatever the
//! address inside: a translator on the way turns them into that IPv4
//! address (`64:ff9b::7f00:1` is 127.0.0.1 behind a NAT64), and a receiver
//! with an IPv4 address can be written with it. (So a server on an
//! IPv6-only network whose DNS64 answers with NAT64 addresses cannot reach
//! an IPv4-only receiver by name: what a translator does with an address is
//! not ours to check.) The IETF's protocol
//! assignments (`192.0.0.0/24`, `2001::/23`) are refused whole too: the few
//! globally reachable blocks inside them (anycast relays, AS112, ORCHIDv2,
//! drone tags) are never a webhook's receiver. The globally reachable
//! blocks outside them (AS112's and AMT's IPv4 blocks, `2620:4f:8000::/48`)
//! are ordinary public unicast and pass.
//!
//! Pure: the URL check at creation and the delivery client's resolver apply
//! it to every address a host has.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address may not be a webhook's destination: the kind of block it
/// lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `0.0.0.0/8` ("this network"), `::`.
    Unspecified,
    Loopback,
    /// RFC 1918, the shared address space of carrier-grade NATs
    /// (`100.64.0.0/10`), unique local (`fc00::/7`) and the deprecated
    /// site-local (`fec0::/10`) addresses.
    Private,
    LinkLocal,
    Multicast,
    Broadcast,
    Documentation,
    Benchmarking,
    /// `192.0.0.0/24` and `2001::/23` apart from their blocks named here.
    ProtocolAssignment,
    Ipv4Mapped,
    Ipv4Compatible,
    Nat64,
    /// `2002::/16`, and the deprecated relay anycast `192.88.99.0/24`.
    SixToFour,
    Teredo,
    DiscardOnly,
    Orchid,
    /// `240.0.0.0/4`, SRv6 SIDs, and IPv6 outside the global unicast space.
    Reserved,
}

impl Refused {
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Unspecified => "an unspecified address",
            Refused::Loopback => "a loopback address",
            Refused::Private => "a private address",
            Refused::LinkLocal => "a link-local address",
            Refused::Multicast => "a multicast address",
            Refused::Broadcast => "a broadcast address",
            Refused::Documentation => "a documentation address",
            Refused::Benchmarking => "a benchmarking address",
            Refused::ProtocolAssignment => "an address of the IETF's protocol assignments",
            Refused::Ipv4Mapped => "an IPv4-mapped address",
            Refused::Ipv4Compatible => "an IPv4-compatible address",
            Refused::Nat64 => "a NAT64 address",
            Refused::SixToFour => "a 6to4 address",
            Refused::Teredo => "a Teredo address",
            Refused::DiscardOnly => "a discard-only address",
            Refused::Orchid => "an ORCHID (an identifier, not a location)",
            Refused::Reserved => "a reserved address",
        }
    }
}

/// One refused block: its first address, its prefix length, its kind.
type Block<A> = (A, u32, Refused);

/// The IPv4 blocks, a block inside another before it.
const V4_BLOCKS: [Block<Ipv4Addr>; 16] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8, Refused::Unspecified),
    (Ipv4Addr::new(10, 0, 0, 0), 8, Refused::Private),
    (Ipv4Addr::new(100, 64, 0, 0), 10, Refused::Private),
    (Ipv4Addr::new(127, 0, 0, 0), 8, Refused::Loopback),
    (Ipv4Addr::new(169, 254, 0, 0), 16, Refused::LinkLocal),
    (Ipv4Addr::new(172, 16, 0, 0), 12, Refused::Private),
    (Ipv4Addr::new(192, 0, 0, 0), 24, Refused::ProtocolAssignment),
    (Ipv4Addr::new(192, 0, 2, 0), 24, Refused::Documentation),
    (Ipv4Addr::new(192, 88, 99, 0), 24, Refused::SixToFour),
    (Ipv4Addr::new(192, 168, 0, 0), 16, Refused::Private),
    (Ipv4Addr::new(198, 18, 0, 0), 15, Refused::Benchmarking),
    (Ipv4Addr::new(198, 51, 100, 0), 24, Refused::Documentation),
    (Ipv4Addr::new(203, 0, 113, 0), 24, Refused::Documentation),
    (Ipv4Addr::new(224, 0, 0, 0), 4, Refused::Multicast),
    (Ipv4Addr::new(255, 255, 255, 255), 32, Refused::Broadcast),
    (Ipv4Addr::new(240, 0, 0, 0), 4, Refused::Reserved),
];

/// The IPv6 blocks, a block inside another before it.
const V6_BLOCKS: [Block<Ipv6Addr>; 20] = [
    (Ipv6Addr::UNSPECIFIED, 128, Refused::Unspecified),
    (Ipv6Addr::LOCALHOST, 128, Refused::Loopback),
    (
        Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0),
        96,
        Refused::Ipv4Mapped,
    ),
    (
        Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0),
        96,
        Refused::Ipv4Compatible,
    ),
    (
        Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0),
        96,
        Refused::Nat64,
    ),
    (
        Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
        48,
        Refused::Nat64,
    ),
    (
        Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
        64,
        Refused::DiscardOnly,
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        32,
        Refused::Teredo,
    ),
    (
        Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0),
        48,
        Refused::Benchmarking,
    ),
    (
        Ipv6Addr::new(0x2001, 0x10, 0, 0, 0, 0, 0, 0),
        28,
        Refused::Orchid,
    ),
    (
        Ipv6Addr::new(0x2001, 0x20, 0, 0, 0, 0, 0, 0),
        28,
        Refused::Orchid,
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        Refused::ProtocolAssignment,
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        Refused::Documentation,
    ),
    (
        Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0),
        16,
        Refused::SixToFour,
    ),
    (
        Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
        20,
        Refused::Documentation,
    ),
    (
        Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0),
        16,
        Refused::Reserved,
    ),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        Refused::Private,
    ),
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        Refused::LinkLocal,
    ),
    (
        Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        Refused::Private,
    ),
    (
        Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
        8,
        Refused::Multicast,
    ),
];

/// The global unicast space: an IPv6 address in none of the blocks above
/// is still reserved unless it lies here.
const GLOBAL_UNICAST: (Ipv6Addr, u32) = (Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);

/// Whether `address` lies in the block of `prefix` bits starting at
/// `first`, both `width` bits wide.
fn within(address: u128, first: u128, prefix: u32, width: u32) -> bool {
    let shift = width - prefix;
    address.checked_shr(shift) == first.checked_shr(shift)
}

/// The kind of the first block `address` lies in.
fn block_of(
    blocks: impl IntoIterator<Item = (u128, u32, Refused)>,
    address: u128,
    width: u32,
) -> Option<Refused> {
    blocks
        .into_iter()
        .find(|(first, prefix, _)| within(address, *first, *prefix, width))
        .map(|(_, _, kind)| kind)
}

fn v4_blocks() -> impl Iterator<Item = (u128, u32, Refused)> {
    V4_BLOCKS
        .into_iter()
        .map(|(first, prefix, kind)| (u32::from(first).into(), prefix, kind))
}

fn v6_blocks() -> impl Iterator<Item = (u128, u32, Refused)> {
    V6_BLOCKS
        .into_iter()
        .map(|(first, prefix, kind)| (first.into(), prefix, kind))
}

/// Whether `ip` is a public address; if not, what it is.
pub fn classify(ip: IpAddr) -> Result<(), Refused> {
    let refused = match ip {
        IpAddr::V4(v4) => block_of(v4_blocks(), u32::from(v4).into(), 32),
        IpAddr::V6(v6) => {
            let address = u128::from(v6);
            let (global, prefix) = GLOBAL_UNICAST;
            block_of(v6_blocks(), address, 128)
                .or((!within(address, global.into(), prefix, 128)).then_some(Refused::Reserved))
        }
    };
    match refused {
        Some(kind) => Err(kind),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(address: &str) -> Result<(), Refused> {
        classify(address.parse().unwrap())
    }

    fn all_refused(addresses: &[&str], kind: Refused) {
        for address in addresses {
            assert_eq!(check(address), Err(kind), "{address}");
        }
    }

    fn all_public(addresses: &[&str]) {
        for address in addresses {
            assert_eq!(check(address), Ok(()), "{address}");
        }
    }

    #[test]
    fn each_block_starts_on_its_prefix_and_none_hides_a_later_one() {
        fn sound(blocks: &[(u128, u32, Refused)], width: u32) {
            for (i, (first, prefix, _)) in blocks.iter().enumerate() {
                let host_bits = (1u128 << (width - prefix)) - 1;
                assert_eq!(first & host_bits, 0, "block {i} starts inside itself");
                for (later_first, later_prefix, _) in &blocks[i + 1..] {
                    assert!(
                        !(later_prefix > prefix && within(*later_first, *first, *prefix, width)),
                        "block {i} hides a later, narrower block"
                    );
                }
            }
        }
        sound(&v4_blocks().collect::<Vec<_>>(), 32);
        sound(&v6_blocks().collect::<Vec<_>>(), 128);
    }

    #[test]
    fn public_unicast_addresses_pass() {
        all_public(&[
            "93.184.216.34",
            "1.1.1.1",
            "8.8.8.8",
            // AS112 and AMT: globally reachable special-purpose blocks.
            "192.31.196.1",
            "192.52.193.1",
            "192.175.48.1",
            "2606:2800:220:1:248:1893:25c8:1946",
            "2620:4f:8000::1",
            "2a00:1450:4001:80b::200e",
        ]);
    }

    #[test]
    fn loopback_is_refused() {
        all_refused(&["127.0.0.1", "127.255.255.254", "::1"], Refused::Loopback);
    }

    #[test]
    fn private_ranges_are_refused() {
        all_refused(
            &[
                "10.1.2.3",
                "172.16.0.1",
                "172.31.255.255",
                "192.168.1.1",
                "100.64.0.1",
                "100.127.255.255",
                "fd00::1",
                "fc00::1",
                "fec0::1",
            ],
            Refused::Private,
        );
        all_public(&["172.32.0.1", "100.128.0.1", "11.0.0.1"]);
    }

    #[test]
    fn link_local_is_refused() {
        all_refused(&["169.254.169.254", "fe80::1"], Refused::LinkLocal);
    }

    #[test]
    fn unspecified_and_this_network_are_refused() {
        all_refused(&["0.0.0.0", "0.1.2.3", "::"], Refused::Unspecified);
    }

    #[test]
    fn multicast_and_broadcast_are_refused() {
        all_refused(
            &["224.0.0.1", "239.255.255.255", "ff02::1"],
            Refused::Multicast,
        );
        assert_eq!(check("255.255.255.255"), Err(Refused::Broadcast));
    }

    #[test]
    fn nat64_is_refused_whatever_it_carries() {
        all_refused(
            &[
                "64:ff9b::7f00:1",
                "64:ff9b::10.0.0.1",
                "64:ff9b::8.8.8.8",
                "64:ff9b:1::7f00:1",
                "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
            ],
            Refused::Nat64,
        );
    }

    #[test]
    fn six_to_four_is_refused() {
        all_refused(
            &[
                "2002:7f00:1::",
                "2002:a00:1::1",
                "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "192.88.99.1",
            ],
            Refused::SixToFour,
        );
        all_public(&["2003::1", "192.88.100.1"]);
    }

    #[test]
    fn ipv4_compatible_is_refused() {
        all_refused(
            &["::127.0.0.1", "::10.0.0.1", "::8.8.8.8", "::0.0.0.2"],
            Refused::Ipv4Compatible,
        );
    }

    #[test]
    fn ipv4_mapped_is_refused() {
        all_refused(
            &[
                "::ffff:127.0.0.1",
                "::ffff:10.0.0.1",
                "::ffff:93.184.216.34",
            ],
            Refused::Ipv4Mapped,
        );
    }

    #[test]
    fn teredo_is_refused() {
        all_refused(
            &[
                "2001::1",
                "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                "2001:0:ffff::1",
            ],
            Refused::Teredo,
        );
    }

    #[test]
    fn benchmarking_is_refused() {
        all_refused(
            &[
                "198.18.0.1",
                "198.19.255.255",
                "2001:2::1",
                "2001:2:0:ffff::1",
            ],
            Refused::Benchmarking,
        );
        all_public(&["198.17.255.255", "198.20.0.0"]);
    }

    #[test]
    fn the_ietf_protocol_assignments_are_refused() {
        all_refused(
            &[
                "192.0.0.0",
                "192.0.0.8",
                "192.0.0.9",
                "192.0.0.170",
                "192.0.0.255",
                "2001:1::1",
                "2001:3::1",
                "2001:4:112::1",
                "2001:30::1",
                "2001:1ff:ffff::1",
            ],
            Refused::ProtocolAssignment,
        );
        all_public(&["191.255.255.255", "192.0.1.0", "2001:200::1"]);
    }

    #[test]
    fn documentation_is_refused() {
        all_refused(
            &[
                "192.0.2.1",
                "198.51.100.7",
                "203.0.113.200",
                "2001:db8::1",
                "3fff::1",
                "3fff:fff::1",
            ],
            Refused::Documentation,
        );
        all_public(&["3fff:1000::1"]);
    }

    #[test]
    fn discard_only_is_refused() {
        all_refused(
            &["100::1", "100::ffff:ffff:ffff:ffff"],
            Refused::DiscardOnly,
        );
    }

    #[test]
    fn orchids_are_refused() {
        all_refused(&["2001:10::1", "2001:20::1", "2001:2f::1"], Refused::Orchid);
    }

    #[test]
    fn reserved_space_is_refused() {
        all_refused(
            &[
                "240.0.0.1",
                "255.255.255.254",
                "5f00::1",
                // Outside the global unicast space.
                "100:0:0:1::1",
                "1::1",
                "4000::1",
                "e000::1",
            ],
            Refused::Reserved,
        );
    }
}
