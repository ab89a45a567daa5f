//! Nice weights and the scaling of the fair tunables with the CPU count.

/// `sched_prio_to_weight[]` (kernel/sched/core.c; `prio_to_weight[]` in
/// kernel/sched/sched.h on 3.x): the load weight of nice -20 ..= 19.
/// Each step is about 1.25x, so one nice level is about 10% of CPU.
pub const PRIO_TO_WEIGHT: [u64; 40] = [
    /* -20 */ 88761, 71755, 56483, 46273, 36291, //
    /* -15 */ 29154, 23254, 18705, 14949, 11916, //
    /* -10 */ 9548, 7620, 6100, 4904, 3906, //
    /*  -5 */ 3121, 2501, 1991, 1586, 1277, //
    /*   0 */ 1024, 820, 655, 526, 423, //
    /*   5 */ 335, 272, 215, 172, 137, //
    /*  10 */ 110, 87, 70, 56, 45, //
    /*  15 */ 36, 29, 23, 18, 15,
];

/// `NICE_0_LOAD` (kernel/sched/sched.h), without the fixed-point shift
/// 64-bit kernels add from 4.7 on.
pub const NICE_0_LOAD: u64 = 1024;

/// `MIN_SHARES` (kernel/sched/sched.h): the smallest weight a group
/// entity can get on one CPU.
pub const MIN_SHARES: u64 = 2;

/// The load weight of a nice level (clamped to -20..=19).
pub fn nice_to_weight(nice: i8) -> u64 {
    let idx = (nice.clamp(-20, 19) as i32 + 20) as usize;
    PRIO_TO_WEIGHT[idx]
}

/// `calc_delta_fair()` (kernel/sched/fair.c): wall time `delta` of an
/// entity of `weight` converted to virtual time (`delta * NICE_0_LOAD /
/// weight`).
pub fn calc_delta_fair(delta: i64, weight: u64) -> i64 {
    if weight == NICE_0_LOAD {
        return delta;
    }
    // In 64 bits when the product fits (always, for any delta under
    // 2^53 ns): the same quotient as in 128 bits without the slow 128-bit
    // division call.
    let w = weight.max(1);
    match delta.checked_mul(NICE_0_LOAD as i64) {
        Some(p) if w <= i64::MAX as u64 => p / w as i64,
        _ => ((delta as i128 * NICE_0_LOAD as i128) / w as i128) as i64,
    }
}

/// `get_update_sysctl_factor()` (kernel/sched/fair.c) with the default
/// `SCHED_TUNABLESCALING_LOG`: 1 + ilog2(min(cpus, 8)).
pub fn tunable_factor(cpus: usize) -> u64 {
    let n = cpus.clamp(1, 8) as u64;
    1 + (63 - n.leading_zeros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factor_is_one_plus_ilog2() {
        assert_eq!(tunable_factor(1), 1);
        assert_eq!(tunable_factor(2), 2);
        assert_eq!(tunable_factor(4), 3);
        assert_eq!(tunable_factor(8), 4);
        assert_eq!(tunable_factor(64), 4);
    }

    #[test]
    fn nice_weights() {
        assert_eq!(nice_to_weight(0), 1024);
        assert_eq!(nice_to_weight(-5), 3121);
        assert_eq!(nice_to_weight(19), 15);
        assert_eq!(calc_delta_fair(1000, 2048), 500);
    }
}
