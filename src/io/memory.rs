//! What this machine gives an evaluation (§15): the memory budget when none is set, read
//! from the kernel's accounting once per process. The checker and engines are handed the
//! number and never read the operating system themselves.

/// The memory budget of an evaluation when none is given (§15): the smaller of 80% of the
/// memory available now (`MemAvailable`, or `MemTotal` where the kernel gives no estimate),
/// the cgroup's limit less what the cgroup already uses, and the address-space limit
/// (`ulimit -v`), so that a program too large for the machine is refused rather than met by
/// the out-of-memory killer or a failed allocation. 8 GiB where none of these can be read.
pub(crate) fn default_max_memory() -> u64 {
    // Read once: settings are made for every run, and a tiny run costs microseconds.
    static MAX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MAX.get_or_init(read_max_memory)
}

fn read_max_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        meminfo
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map(|kib| kib.saturating_mul(1024))
    };
    let available = field("MemAvailable:").or_else(|| field("MemTotal:"));
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let cgroup = read("/sys/fs/cgroup/memory.max")
        .and_then(|max| max.trim().parse::<u64>().ok())
        .map(|max| {
            let used = read("/sys/fs/cgroup/memory.current")
                .and_then(|u| u.trim().parse::<u64>().ok())
                .unwrap_or(0);
            max.saturating_sub(used)
        });
    let machine = [available, cgroup].into_iter().flatten().min();
    let budget = machine.map_or(8 << 30, |m| m / 10 * 8);
    match address_space_limit() {
        Some(limit) => budget.min(limit),
        None => budget,
    }
}

/// `ulimit -v` of this process (its soft limit, "Max address space" in `/proc/self/limits`),
/// when one is set. Address space is not memory: the program, its libraries and its
/// threads' stacks take some before any tensor does, so what is left for tensors is counted
/// as the limit less the address space in use now (`VmSize`).
fn address_space_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    let soft = line
        .trim_start_matches("Max address space")
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let used = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kib| kib.saturating_mul(1024));
    Some(soft.saturating_sub(used))
}
