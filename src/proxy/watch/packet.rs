//! The kernel's refusal of a connect, as a packet: the classic BPF program the packet
//! socket filters with, and the parser of what passes it. Pure (bytes in, facts out),
//! so both are tested on captured packets.
//!
//! A refused connect is the kernel's answer to a SYN for a port nothing listens on: a
//! TCP segment from that port with RST and ACK set, sequence number 0, acknowledging
//! the SYN (`tcp_v4_send_reset` / `tcp_v6_send_reset` answering a segment without
//! ACK). Nothing else a host sends looks like that: a connection aborted by its owner
//! (SO_LINGER 0, a crash, a listener closed with connections queued) resets with its
//! own nonzero sequence number, a reset answering a segment that has ACK carries no
//! ACK. So the filter passes exactly the refusals, and each is one connect attempt
//! refused — whatever the state of haq's own listener when the SYN came, the kernel
//! decided it.
//!
//! The socket is `SOCK_DGRAM` (cooked): the program sees the packet from its network
//! header on, whatever the interface's link layer. It takes only the outgoing copy
//! (`PACKET_OUTGOING`): on the loopback interface every packet is also seen a second
//! time, as received.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Bytes of each passing packet handed to user space (IPv6 + TCP headers fit).
pub const SNAP: u32 = 128;

/// More ports than this and the program does not compare ports (its jumps are 8-bit):
/// every refusal passes and user space picks the proxies' own.
pub const MAX_PORTS: usize = 200;

/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: the ancillary load of the packet's type.
const AD_PKTTYPE: u32 = 0xffff_f000 + 4;
/// `PACKET_OUTGOING`.
pub const OUTGOING: u32 = 4;

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

// Opcodes (linux/filter.h, linux/bpf_common.h).
pub const LD_W_ABS: u16 = 0x20;
pub const LD_H_ABS: u16 = 0x28;
pub const LD_B_ABS: u16 = 0x30;
pub const LD_W_IND: u16 = 0x40;
pub const LD_H_IND: u16 = 0x48;
pub const LD_B_IND: u16 = 0x50;
pub const LDX_B_MSH: u16 = 0xb1;
pub const AND_K: u16 = 0x54;
pub const JA: u16 = 0x05;
pub const JEQ_K: u16 = 0x15;
pub const JSET_K: u16 = 0x45;
pub const RET_K: u16 = 0x06;

/// Where a jump goes.
#[derive(Clone, Copy)]
enum To {
    Next,
    Drop,
    Ports,
    Accept,
}

/// The program: outgoing IPv4/IPv6 TCP segments with RST+ACK (no SYN, no FIN) and
/// sequence number 0 from one of `ports`.
pub fn program(ports: &[u16]) -> Vec<Insn> {
    use To::*;
    let mut p: Vec<(u16, To, To, u32)> = vec![
        (LD_W_ABS, Next, Next, AD_PKTTYPE),
        (JEQ_K, Next, Drop, OUTGOING),
        (LD_B_ABS, Next, Next, 0),
        (AND_K, Next, Next, 0xf0),
        // IPv4 (falls through to IPv6 at index 17 when not 4).
        (JEQ_K, Next, Next, 0x40), // patched below: jf → the IPv6 part
        (LD_B_ABS, Next, Next, 9),
        (JEQ_K, Next, Drop, 6),
        (LD_H_ABS, Next, Next, 6),
        (JSET_K, Drop, Next, 0x1fff),
        (LDX_B_MSH, Next, Next, 0),
        (LD_B_IND, Next, Next, 13),
        (AND_K, Next, Next, 0x17),
        (JEQ_K, Next, Drop, 0x14),
        (LD_W_IND, Next, Next, 4),
        (JEQ_K, Next, Drop, 0),
        (LD_H_IND, Next, Next, 0),
        (JA, Ports, Ports, 0),
        // IPv6, with TCP right after the fixed header (a kernel reset has no extension).
        (JEQ_K, Next, Drop, 0x60),
        (LD_B_ABS, Next, Next, 6),
        (JEQ_K, Next, Drop, 6),
        (LD_B_ABS, Next, Next, 53),
        (AND_K, Next, Next, 0x17),
        (JEQ_K, Next, Drop, 0x14),
        (LD_W_ABS, Next, Next, 44),
        (JEQ_K, Next, Drop, 0),
        (LD_H_ABS, Next, Next, 40),
        (JA, Ports, Ports, 0),
        (RET_K, Next, Next, 0),
    ];
    const V4_JEQ: usize = 4;
    const V6: usize = 17;
    let drop = p.len() - 1;
    let ports_at = p.len();
    if ports.len() <= MAX_PORTS {
        for &port in ports {
            p.push((JEQ_K, Accept, Next, u32::from(port)));
        }
        p.push((RET_K, Next, Next, 0));
    }
    let accept = p.len();
    p.push((RET_K, Next, Next, SNAP));
    let target = |t: To, next: usize| match t {
        Next => next,
        Drop => drop,
        Ports => ports_at,
        Accept => accept,
    };
    p.iter()
        .enumerate()
        .map(|(i, &(code, jt, jf, k))| {
            let rel = |to: usize| (to - (i + 1)) as u8;
            match code {
                JA => Insn {
                    code,
                    jt: 0,
                    jf: 0,
                    k: (target(jt, i + 1) - (i + 1)) as u32,
                },
                JEQ_K | JSET_K => {
                    let jf_to = if i == V4_JEQ { V6 } else { target(jf, i + 1) };
                    Insn {
                        code,
                        jt: rel(target(jt, i + 1)),
                        jf: rel(jf_to),
                        k,
                    }
                }
                _ => Insn {
                    code,
                    jt: 0,
                    jf: 0,
                    k,
                },
            }
        })
        .collect()
}

/// A refused connect: the kernel's reset from `from` (the proxy's address) to `peer`
/// (who tried), answering the SYN whose sequence number was `isn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub from: SocketAddr,
    pub peer: SocketAddr,
    pub isn: u32,
}

/// The refusal a packet (from its network header) carries, if it is one.
pub fn parse(p: &[u8]) -> Option<Refusal> {
    let (src, dst, tcp): (IpAddr, IpAddr, &[u8]) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl < 20 || p.len() < ihl + 20 || p[9] != 6 {
                return None;
            }
            if u16::from_be_bytes([p[6], p[7]]) & 0x1fff != 0 {
                return None;
            }
            let a = |o: usize| IpAddr::V4(Ipv4Addr::new(p[o], p[o + 1], p[o + 2], p[o + 3]));
            (a(12), a(16), &p[ihl..])
        }
        6 => {
            if p.len() < 60 || p[6] != 6 {
                return None;
            }
            let a = |o: usize| {
                let b: [u8; 16] = p[o..o + 16].try_into().unwrap_or([0; 16]);
                IpAddr::V6(Ipv6Addr::from(b))
            };
            (a(8), a(24), &p[40..])
        }
        _ => return None,
    };
    let be16 = |o: usize| u16::from_be_bytes([tcp[o], tcp[o + 1]]);
    let be32 = |o: usize| u32::from_be_bytes([tcp[o], tcp[o + 1], tcp[o + 2], tcp[o + 3]]);
    if tcp[13] & 0x17 != 0x14 || be32(4) != 0 {
        return None;
    }
    Some(Refusal {
        from: SocketAddr::new(src, be16(0)),
        peer: SocketAddr::new(dst, be16(2)),
        isn: be32(8).wrapping_sub(1),
    })
}

#[cfg(test)]
mod tests;
