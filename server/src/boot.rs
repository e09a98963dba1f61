//! Which boot of its machine sfsd runs in: what sfsd leaves in the kernel's page cache (an
//! unstable write, the reply cache's journal) outlives sfsd itself, but not a reboot. Both the
//! write verifier and the journal are tied to the boot they were made in.

/// Where Linux keeps the identity of its current boot: a random UUID drawn at each boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// The boot's id, or None where it cannot be read (every start then counts as a new boot).
pub(crate) fn id() -> Option<Vec<u8>> {
    std::fs::read(BOOT_ID)
        .ok()
        .map(|id| id.trim_ascii().to_vec())
        .filter(|id| !id.is_empty())
}

/// SHA-256 of `label`, a NUL and the boot id `id`: a value that changes with the boot, from
/// which nobody learns the id itself (or one made for another use).
pub(crate) fn tag(label: &str, id: &[u8]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(label.as_bytes());
    ctx.update(b"\0");
    ctx.update(id);
    let mut out = [0; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}
