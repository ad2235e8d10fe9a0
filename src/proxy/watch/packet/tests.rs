//! The filter and the parser on packets captured on this machine's loopback interface
//! (an `AF_PACKET`/`SOCK_DGRAM` socket, so each starts at its IP header): a connect to
//! a closed port over IPv4 and IPv6 (the SYN and the kernel's refusal), and a
//! connection accepted then aborted by its server (SYN-ACK, ACK, the SO_LINGER 0
//! reset). The program runs in a small classic-BPF interpreter (the instructions it
//! uses, as linux/filter.h defines them), with the packet type the kernel would give.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// 127.0.0.1:41870 → 127.0.0.1:56783 (nothing listens), SYN.
const SYN4: &str = "4500003c26464000400616747f0000017f000001a38eddcf51ce947f00000000a002ffd7fe3000000204ffd70402080a137caad3000000000103030a";
/// The kernel's answer from :56783: RST+ACK, seq 0, ack = the SYN's + 1.
const REFUSED4: &str =
    "450000280000400040063cce7f0000017f000001ddcfa38e0000000051ce9480501400004a210000";
/// [::1]:39692 → [::1]:35893 (nothing listens), SYN, and the refusal.
const SYN6: &str = "600076160028064000000000000000000000000000000001000000000000000000000000000000019b0c8c35d657a05800000000a002ffc4003000000204ffc40402080abcdfc9df000000000103030a";
const REFUSED6: &str = "600455150014064000000000000000000000000000000001000000000000000000000000000000018c359b0c00000000d657a05950140000001c0000";
/// A listener on :33541 accepts (SYN-ACK), the client ACKs, the server aborts its side
/// (SO_LINGER 0): RST+ACK with the connection's own sequence number.
const SYNACK4: &str = "4500003c0000400040063cba7f0000017f0000018305c3f4cb1397333bc2ae78a012ffcbfe3000000204ffd70402080a701217f5774d44ee0103030a";
const ACK4: &str = "450000342ef4400040060dce7f0000017f000001c3f483053bc2ae78cb13973480100040fe2800000101080a774d44ee701217f5";
const ABORT4: &str = "45000034daff4000400661c27f0000017f0000018305c3f4cb1397343bc2ae7880140040fe2800000101080a701217f5774d44ee";

const PACKET_HOST: u32 = 0;

/// Runs `prog` on `pkt` as the kernel would for a packet of type `pkttype`; returns
/// the bytes it accepts (0 = dropped).
fn run(prog: &[Insn], pkt: &[u8], pkttype: u32) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let load = |off: u32, n: usize| -> Option<u32> {
        if off == AD_PKTTYPE {
            return Some(pkttype);
        }
        let o = off as usize;
        let b = pkt.get(o..o + n)?;
        Some(b.iter().fold(0u32, |acc, &v| (acc << 8) | u32::from(v)))
    };
    loop {
        let i = prog[pc];
        pc += 1;
        let jump = |c: bool| if c { i.jt } else { i.jf } as usize;
        // A load past the end of the packet ends the program: dropped.
        let ld = |off: u32, n: usize| load(off, n).ok_or(0u32);
        let r = match i.code {
            LD_W_ABS => ld(i.k, 4).map(|v| a = v),
            LD_H_ABS => ld(i.k, 2).map(|v| a = v),
            LD_B_ABS => ld(i.k, 1).map(|v| a = v),
            LD_W_IND => ld(x + i.k, 4).map(|v| a = v),
            LD_H_IND => ld(x + i.k, 2).map(|v| a = v),
            LD_B_IND => ld(x + i.k, 1).map(|v| a = v),
            LDX_B_MSH => ld(i.k, 1).map(|v| x = (v & 0xf) * 4),
            _ => Ok(()),
        };
        if r.is_err() {
            return 0;
        }
        match i.code {
            LD_W_ABS | LD_H_ABS | LD_B_ABS | LD_W_IND | LD_H_IND | LD_B_IND | LDX_B_MSH => {}
            AND_K => a &= i.k,
            JA => pc += i.k as usize,
            JEQ_K => pc += jump(a == i.k),
            JSET_K => pc += jump(a & i.k != 0),
            RET_K => return i.k,
            other => panic!("opcode {other:#x} not used by the program"),
        }
    }
}

#[test]
fn the_filter_passes_exactly_the_outgoing_refusals_from_the_watched_ports() {
    let prog = program(&[56783, 35893, 33541]);
    for (name, pkt, want) in [
        ("refused v4", REFUSED4, SNAP),
        ("refused v6", REFUSED6, SNAP),
        ("syn v4", SYN4, 0),
        ("syn v6", SYN6, 0),
        ("syn-ack", SYNACK4, 0),
        ("ack", ACK4, 0),
        ("abort reset", ABORT4, 0),
    ] {
        assert_eq!(run(&prog, &hex(pkt), OUTGOING), want, "{name}");
        // The loopback interface shows each packet again as received: not counted twice.
        assert_eq!(
            run(&prog, &hex(pkt), PACKET_HOST),
            0,
            "{name} (incoming copy)"
        );
    }
    // Another port's refusal does not pass.
    let other = program(&[9101, 9102]);
    assert_eq!(run(&other, &hex(REFUSED4), OUTGOING), 0);
    assert_eq!(run(&other, &hex(REFUSED6), OUTGOING), 0);
    // Past the ports the jumps can reach, every refusal passes (user space picks).
    let many: Vec<u16> = (1..=(MAX_PORTS as u16 + 1)).collect();
    let prog = program(&many);
    assert_eq!(run(&prog, &hex(REFUSED4), OUTGOING), SNAP);
    assert_eq!(run(&prog, &hex(ABORT4), OUTGOING), 0);
    // Every jump lands inside the program.
    for prog in [program(&[1, 2, 3]), program(&many), program(&[])] {
        for (i, ins) in prog.iter().enumerate() {
            let far = match ins.code {
                JA => i + 1 + ins.k as usize,
                JEQ_K | JSET_K => i + 1 + usize::from(ins.jt.max(ins.jf)),
                _ => i,
            };
            assert!(far < prog.len(), "insn {i} jumps out");
        }
        assert_eq!(prog.last().map(|i| i.code), Some(RET_K));
    }
}

#[test]
fn a_fragment_or_a_non_tcp_packet_does_not_pass() {
    let prog = program(&[56783]);
    let mut frag = hex(REFUSED4);
    frag[7] = 0x08; // fragment offset 8
    assert_eq!(run(&prog, &frag, OUTGOING), 0);
    assert_eq!(parse(&frag), None);
    let mut udp = hex(REFUSED4);
    udp[9] = 17;
    assert_eq!(run(&prog, &udp, OUTGOING), 0);
    assert_eq!(parse(&udp), None);
    assert_eq!(parse(&[]), None);
    assert_eq!(parse(&hex(REFUSED4)[..30]), None, "cut short");
}

#[test]
fn the_parser_reads_who_tried_and_which_port_refused() {
    let r = parse(&hex(REFUSED4)).expect("a refusal");
    assert_eq!(r.from, "127.0.0.1:56783".parse().expect("addr"));
    assert_eq!(r.peer, "127.0.0.1:41870".parse().expect("addr"));
    // The SYN it answers: its sequence number.
    assert_eq!(r.isn, 0x51ce_947f);
    let syn = hex(SYN4);
    assert_eq!(
        u32::from_be_bytes([syn[24], syn[25], syn[26], syn[27]]),
        r.isn
    );
    let r6 = parse(&hex(REFUSED6)).expect("a refusal");
    assert_eq!(r6.from, "[::1]:35893".parse().expect("addr"));
    assert_eq!(r6.peer, "[::1]:39692".parse().expect("addr"));
    assert_eq!(r6.isn, 0xd657_a058);
    for other in [SYN4, SYN6, SYNACK4, ACK4, ABORT4] {
        assert_eq!(parse(&hex(other)), None, "{other}");
    }
}
