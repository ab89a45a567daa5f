//! What one guest channel may cost the host: a token bucket on messages and
//! one on bytes ([`ChannelLimits`], [`ChannelLimiter`]).
//!
//! Every message a guest sends, whatever its type (`Hello` and `Heartbeat`
//! included), takes one message token and its frame's length in byte
//! tokens. The host reads a channel only while it has byte tokens, so a
//! guest that writes faster than its byte rate fills its own socket buffer
//! and blocks: the host's reading and decoding work per channel is bounded
//! by the byte rate, whatever the guest sends. Messages past the message
//! rate are coalesced (HELP / NO-HELP: the latest is kept) or dropped.

use crate::{Nanos, SEC};

/// A token bucket: `rate` tokens per second, at most `burst` held.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Nanos,
}

impl TokenBucket {
    /// A full bucket at time `now`. `rate` and `burst` must be finite and
    /// positive (see [`ChannelLimits::validate`]).
    pub fn new(rate: f64, burst: f64, now: Nanos) -> TokenBucket {
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Nanos) {
        // A clock that goes back adds nothing.
        let dt = now.saturating_sub(self.at) as f64 / SEC as f64;
        self.at = self.at.max(now);
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
    }

    /// New rate and burst from `now` on (a configuration reload); the
    /// tokens held stay, up to the new burst.
    pub fn set(&mut self, rate: f64, burst: f64, now: Nanos) {
        self.refill(now);
        self.rate = rate;
        self.burst = burst;
        self.tokens = self.tokens.min(burst);
    }

    /// Whole tokens available at `now`.
    pub fn available(&mut self, now: Nanos) -> f64 {
        self.refill(now);
        self.tokens.floor().max(0.0)
    }

    /// Takes `n` tokens if the bucket holds them.
    pub fn take(&mut self, now: Nanos, n: f64) -> bool {
        self.refill(now);
        if self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }

    /// Takes `n` tokens whether or not the bucket holds them (it may go
    /// negative: the debt is paid back before anything else is allowed).
    pub fn charge(&mut self, now: Nanos, n: f64) {
        self.refill(now);
        self.tokens -= n;
    }

    /// How long from `now` until `n` tokens are available (0: now).
    pub fn wait_for(&mut self, now: Nanos, n: f64) -> Nanos {
        self.refill(now);
        let missing = n - self.tokens;
        if missing <= 0.0 {
            return 0;
        }
        let ns = (missing / self.rate * SEC as f64).ceil();
        if ns.is_finite() && ns < u64::MAX as f64 {
            ns as Nanos
        } else {
            Nanos::MAX
        }
    }
}

/// The per-channel limits (hostd's `rate_limit`, `rate_burst`,
/// `rate_limit_bytes`, `rate_burst_bytes`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChannelLimits {
    /// Messages per second.
    pub msg_rate: f64,
    /// Messages at once above the rate.
    pub msg_burst: f64,
    /// Bytes per second read from the channel.
    pub byte_rate: f64,
    /// Bytes at once above the rate.
    pub byte_burst: f64,
}

/// The largest rate or burst accepted: far above any honest guest, and small
/// enough that token arithmetic in `f64` stays exact to the token.
pub const MAX_RATE: f64 = 1e9;

impl ChannelLimits {
    /// Every value finite and in range; the byte burst holds at least one
    /// whole frame, or a long frame could never be read.
    pub fn validate(&self) -> Result<(), String> {
        let check = |name: &str, v: f64, lo: f64| {
            if v.is_finite() && (lo..=MAX_RATE).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "{name} = {v}: it must be a finite number from {lo} to {MAX_RATE}"
                ))
            }
        };
        check("rate_limit", self.msg_rate, 0.001)?;
        check("rate_burst", self.msg_burst, 1.0)?;
        check("rate_limit_bytes", self.byte_rate, 1.0)?;
        check(
            "rate_burst_bytes",
            self.byte_burst,
            crate::MAX_MESSAGE_BYTES as f64,
        )?;
        Ok(())
    }
}

/// A channel's two buckets.
#[derive(Clone, Debug)]
pub struct ChannelLimiter {
    msgs: TokenBucket,
    bytes: TokenBucket,
}

impl ChannelLimiter {
    pub fn new(l: &ChannelLimits, now: Nanos) -> ChannelLimiter {
        ChannelLimiter {
            msgs: TokenBucket::new(l.msg_rate, l.msg_burst, now),
            bytes: TokenBucket::new(l.byte_rate, l.byte_burst, now),
        }
    }

    /// New limits from `now` on (a configuration reload).
    pub fn set_limits(&mut self, l: &ChannelLimits, now: Nanos) {
        self.msgs.set(l.msg_rate, l.msg_burst, now);
        self.bytes.set(l.byte_rate, l.byte_burst, now);
    }

    /// How many bytes the host may read now (0: wait [`Self::read_wait`]).
    pub fn readable(&mut self, now: Nanos) -> usize {
        self.bytes.available(now) as usize
    }

    /// How long until at least one byte may be read.
    pub fn read_wait(&mut self, now: Nanos) -> Nanos {
        self.bytes.wait_for(now, 1.0)
    }

    /// `n` bytes were read.
    pub fn bytes_read(&mut self, now: Nanos, n: usize) {
        self.bytes.charge(now, n as f64);
    }

    /// Whether one more message is within the message rate (and takes it).
    pub fn message(&mut self, now: Nanos) -> bool {
        self.msgs.take(now, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MS;

    #[test]
    fn bucket_limits() {
        let mut b = TokenBucket::new(10.0, 5.0, 0);
        let n = (0..100).filter(|_| b.take(0, 1.0)).count();
        assert_eq!(n, 5);
        assert!(b.take(100 * MS, 1.0));
        assert!(!b.take(100 * MS, 1.0));
        assert_eq!(b.wait_for(100 * MS, 1.0), 100 * MS);
        // A clock going back neither adds tokens nor panics.
        assert!(!b.take(0, 1.0));
    }

    #[test]
    fn bytes_are_read_no_faster_than_the_rate() {
        let l = ChannelLimits {
            msg_rate: 200.0,
            msg_burst: 50.0,
            byte_rate: 1000.0,
            byte_burst: 256.0,
        };
        l.validate().unwrap();
        let mut c = ChannelLimiter::new(&l, 0);
        let mut t = 0;
        let mut read = 0usize;
        // A reader that reads whatever it may, for 10 s.
        while t < 10 * SEC {
            let n = c.readable(t).min(256);
            if n == 0 {
                t += c.read_wait(t).max(1);
                continue;
            }
            c.bytes_read(t, n);
            read += n;
        }
        assert!(read <= 256 + 10_000 + 1, "{read}");
        assert!(read >= 10_000, "{read}");
    }

    #[test]
    fn every_message_counts() {
        let l = ChannelLimits {
            msg_rate: 10.0,
            msg_burst: 3.0,
            byte_rate: 1e6,
            byte_burst: 1e6,
        };
        let mut c = ChannelLimiter::new(&l, 0);
        assert_eq!((0..10).filter(|_| c.message(0)).count(), 3);
        assert!(c.message(100 * MS));
        // A reload to 1 per second: the next token comes a second later.
        c.set_limits(
            &ChannelLimits {
                msg_rate: 1.0,
                msg_burst: 1.0,
                ..l
            },
            100 * MS,
        );
        assert!(!c.message(600 * MS));
        assert!(c.message(1100 * MS));
    }

    #[test]
    fn bad_limits_are_named() {
        let ok = ChannelLimits {
            msg_rate: 200.0,
            msg_burst: 50.0,
            byte_rate: 8192.0,
            byte_burst: 4096.0,
        };
        for (l, name) in [
            (
                ChannelLimits {
                    msg_burst: f64::NAN,
                    ..ok
                },
                "rate_burst = NaN",
            ),
            (
                ChannelLimits {
                    msg_rate: f64::INFINITY,
                    ..ok
                },
                "rate_limit = inf",
            ),
            (
                ChannelLimits {
                    msg_rate: 0.0,
                    ..ok
                },
                "rate_limit = 0",
            ),
            (
                ChannelLimits {
                    byte_burst: 100.0,
                    ..ok
                },
                "rate_burst_bytes = 100",
            ),
        ] {
            let e = l.validate().unwrap_err();
            assert!(e.starts_with(name), "{e}");
        }
    }
}
