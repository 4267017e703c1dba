//! Session passwords as Apache ZooKeeper derives them (`ZooKeeperServer.generatePasswd`): 16
//! bytes from `java.util.Random` seeded with the session id xor a constant. A session moved
//! from ZooKeeper keeps the password its client holds, and a session Warden creates gets the
//! password ZooKeeper would compute, so it survives a move back to ZooKeeper too.

/// `ZooKeeperServer.superSecret`.
const SUPER_SECRET: i64 = 0xB341_5C00;

/// `java.util.Random`'s 48-bit linear congruential generator.
struct JavaRandom(u64);

impl JavaRandom {
    const MULTIPLIER: u64 = 0x5_DEEC_E66D;
    const MASK: u64 = (1 << 48) - 1;

    fn new(seed: i64) -> JavaRandom {
        JavaRandom((seed as u64 ^ Self::MULTIPLIER) & Self::MASK)
    }

    fn next_int(&mut self) -> i32 {
        self.0 = (self.0.wrapping_mul(Self::MULTIPLIER).wrapping_add(0xB)) & Self::MASK;
        (self.0 >> 16) as i32
    }

    /// `Random.nextBytes`: each int fills up to four bytes, low byte first.
    fn next_bytes(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(4) {
            let mut rnd = self.next_int();
            for b in chunk {
                *b = rnd as u8;
                rnd >>= 8;
            }
        }
    }
}

/// The password ZooKeeper gives session `id`.
pub fn session_password(id: i64) -> [u8; 16] {
    let mut out = [0; 16];
    JavaRandom::new(id ^ SUPER_SECRET).next_bytes(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Values printed by OpenJDK 17: `new Random(42).nextInt()`, and `generatePasswd` of three
    /// session ids (one from server 1, a small one, a negative one).
    #[test]
    fn matches_a_jvm() {
        assert_eq!(JavaRandom::new(42).next_int(), -1_170_105_035);
        assert_eq!(hex(&session_password(0x0100_0001_2345_6789)), "b11647e5db8ff1c8bd6768eac33a41ce");
        assert_eq!(hex(&session_password(0x7f)), "bcecb64873c8fde84c715024728d281f");
        assert_eq!(hex(&session_password(-5)), "d47144b5e45e45c49c3b7fdcd66257ba");
    }
}
