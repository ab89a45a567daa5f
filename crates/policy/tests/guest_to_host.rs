//! The guest side and the host side together: detector, help client, wire,
//! arbiter. Properties: while a guest needs help, the lease it asked for never
//! lapses (the client renews in time), it sends nothing redundant, and the
//! host boosts it from its first HELP until its NO-HELP.

use policy::{
    decode, Arbiter, BfqStateDetector, BoostChange, HelpClient, HelpReason, Message, Nanos,
    PolicyConfig, Resource, Urgency, MS, SEC,
};
use proptest::prelude::*;

/// Alternating stretches of need and no need: (need, length, how much need
/// remains as the guest sees it).
fn stretches() -> impl Strategy<Value = Vec<(bool, Nanos, Nanos)>> {
    proptest::collection::vec((any::<bool>(), 1..4 * SEC, 1..6 * SEC), 1..30)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_client_keeps_a_live_need_covered(plan in stretches(), lease_ms in 10u64..3000) {
        // Whole milliseconds, as the wire carries them: no rounding slack.
        let lease = lease_ms * MS;
        let mut client = HelpClient::new(lease);
        let mut t: Nanos = 0;
        let mut covered_until: Option<Nanos> = None;
        for &(needed, length, remaining) in &plan {
            let end = t + length;
            // The need's own end, as the guest's detector reports it.
            let need_end = t + remaining;
            loop {
                let live = needed && t < need_end;
                let u = if live {
                    Urgency::Help { resource: Resource::Io, reason: HelpReason::Exec, duration_ns: need_end - t }
                } else {
                    Urgency::NoHelp
                };
                match client.step(t, &u) {
                    Some(Message::Help { duration_hint_ms, .. }) => {
                        prop_assert!(live);
                        prop_assert!(duration_hint_ms as Nanos * MS <= lease + MS);
                        covered_until = Some(t + duration_hint_ms as Nanos * MS);
                    }
                    Some(Message::NoHelp { .. }) => {
                        prop_assert!(!live);
                        prop_assert!(covered_until.is_some(), "NO-HELP without a HELP");
                        covered_until = None;
                    }
                    Some(m) => prop_assert!(false, "unexpected {:?}", m),
                    None => {}
                }
                if live {
                    let c = covered_until.expect("a live need is asked for");
                    prop_assert!(c > t, "lease lapsed at {}", t);
                }
                // Next step: the client's deadline, the need's end, or the stretch's end.
                let mut next = end;
                if needed && need_end > t {
                    next = next.min(need_end);
                }
                if let Some(d) = client.next_deadline() {
                    prop_assert!(d > t, "deadline {} not after {}", d, t);
                    next = next.min(d);
                }
                // Between steps the lease must hold while the need lasts.
                if live {
                    prop_assert!(covered_until.unwrap() >= next.min(need_end), "gap before {}", next);
                }
                if next >= end {
                    break;
                }
                t = next;
            }
            t = end;
        }
    }
}

/// A guest whose BFQ raises a queue for 2.5 s, over the wire to a host with
/// another VM: boosted from the first HELP until the NO-HELP, with renewals
/// in between and nothing else.
#[test]
fn a_raising_guest_is_boosted_for_its_raising() {
    let cfg = PolicyConfig::default();
    let lease = cfg.max_lease_ns;
    let mut host = Arbiter::new(cfg);
    host.add_vm(1, 1);
    host.add_vm(2, 1);
    let mut det = BfqStateDetector::new(lease);
    let mut client = HelpClient::new(lease);
    let (start, stop) = (100 * MS, 2600 * MS);
    let mut boosted_at = Vec::new();
    let mut wire = Vec::new();
    let mut t = 0;
    while t <= 4 * SEC {
        let raised = usize::from((start..stop).contains(&t));
        if let Some(u) = det.observe(t, raised, 0) {
            if let Some(m) = client.step(t, &u) {
                wire.extend(m.encode());
            }
        }
        while let Ok((m, n)) = decode(&wire) {
            wire.drain(..n);
            match m {
                Message::Help {
                    duration_hint_ms, ..
                } => host.help(1, t, duration_hint_ms as Nanos * MS),
                Message::NoHelp { .. } => host.no_help(1, t),
                m => panic!("unexpected {m:?}"),
            }
        }
        while host.next_deadline().is_some_and(|d| d <= t) {
            for c in host.update(t) {
                boosted_at.push((t, c));
            }
        }
        t += 10 * MS;
    }
    assert_eq!(
        boosted_at,
        vec![
            (start, BoostChange::Boost(1)),
            (stop, BoostChange::Unboost(1, policy::UnboostReason::NoHelp))
        ]
    );
    assert_eq!(
        host.stats(1).unwrap().helps,
        5,
        "one HELP and four renewals"
    );
}
