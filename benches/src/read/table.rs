//! The rows a read run prints: medians per configuration, the ratios between them, the
//! table, and the lines about issue 27's aim.

use super::*;

#[derive(Serialize)]
pub(super) struct Row {
    pub(super) mode: Mode,
    pub(super) cpus: usize,
    pub(super) clients: usize,
    pub(super) reps: usize,
    pub(super) mb_per_s: f64,
    pub(super) mb_per_s_min: f64,
    pub(super) mb_per_s_max: f64,
    speedup_vs_uni1: Option<f64>,
    pub(super) mp_over_ncopy: Option<f64>,
    /// For peer rows: sfsd `mp` throughput divided by this row's, at the same CPU count.
    pub(super) mp_over_this: Option<f64>,
    /// For peer rows whose cipher is of the family sfsd used in this run: sfsd `mp`'s
    /// cpu-s/GB divided by this row's, at the same CPU count (below 1: sfsd spends less).
    pub(super) mp_cpu_over_this: Option<f64>,
    pub(super) server_cpu_s_per_gb: f64,
    /// The kernel's share of `server_cpu_s_per_gb` (system calls, the page-cache copy, and
    /// loopback TCP, whose receiving side runs inside the server's sends).
    pub(super) server_system_share: Option<f64>,
    /// With `--backend nfs`: NFS-Ganesha's CPU per byte, besides sfsd's.
    pub(super) backend_cpu_s_per_gb: Option<f64>,
    /// Each `--watch` process tree's CPU per byte, besides sfsd's: (name, cpu-s/GB).
    pub(super) watched_cpu_s_per_gb: Vec<(String, f64)>,
    /// The load clients' CPU per byte (they frame replies without opening them unless
    /// `--verify`; sftp clients decrypt everything).
    pub(super) client_cpu_s_per_gb: f64,
    /// The record layer's seal cost alone, measured in this run on one core.
    pub(super) cipher_seal_cpu_s_per_gb: f64,
    /// `server_cpu_s_per_gb` over `cipher_seal_cpu_s_per_gb`.
    pub(super) server_over_cipher: f64,
    pub(super) serial_fraction: Option<f64>,
    pub(super) amdahl_bound: Option<f64>,
    pub(super) clients_share_server_cpus: bool,
}

/// One row per configuration: medians over its samples and the ratios between rows.
/// `(clients, machine_cpus)`: the load's shape, for the notes; `(sfs_cipher, cipher)`: the
/// cipher sfsd sealed with in this run and its seal cost alone in cpu-s/GB; `watch`: the
/// processes whose CPU per byte the samples hold, in order.
pub(super) fn summarise(
    configs: &[Config],
    samples: &[Vec<Sample>],
    (clients, machine_cpus): (usize, usize),
    (sfs_cipher, cipher): (Cipher, f64),
    watch: &[Watch],
) -> Vec<Row> {
    let med = |i: usize| median(&samples[i].iter().map(|s| s.mb_per_s).collect::<Vec<_>>());
    let med_cpu = |i: usize| {
        median(
            &samples[i]
                .iter()
                .map(|s| s.server_cpu_s_per_gb)
                .collect::<Vec<_>>(),
        )
    };
    let find = |mode: Mode, cpus: usize| {
        configs
            .iter()
            .position(|c| c.mode == mode && c.cpus == cpus)
    };
    let uni1 = find(Mode::Uni, 1).map(med);
    configs
        .iter()
        .enumerate()
        .map(|(i, config)| {
            let rates: Vec<f64> = samples[i].iter().map(|s| s.mb_per_s).collect();
            let (lo, hi) = spread(&rates);
            let mb = median(&rates);
            let per_gb =
                |f: fn(&Sample) -> f64| median(&samples[i].iter().map(f).collect::<Vec<_>>());
            let server_cpu = per_gb(|s| s.server_cpu_s_per_gb);
            let median_of =
                |f: fn(&Sample) -> Option<f64>| median_of_present(samples[i].iter().map(f));
            let serial = median_of(|s| s.serial_fraction);
            Row {
                mode: config.mode,
                cpus: config.cpus,
                clients,
                reps: samples[i].len(),
                mb_per_s: mb,
                mb_per_s_min: lo,
                mb_per_s_max: hi,
                speedup_vs_uni1: uni1.map(|u| mb / u),
                mp_over_ncopy: (config.mode == Mode::Mp)
                    .then(|| find(Mode::Ncopy, config.cpus).map(|j| mb / med(j)))
                    .flatten(),
                mp_over_this: config
                    .mode
                    .cipher()
                    .and_then(|_| find(Mode::Mp, config.cpus))
                    .map(|j| med(j) / mb),
                mp_cpu_over_this: (config.mode.family() == Some(sfs_cipher))
                    .then(|| find(Mode::Mp, config.cpus))
                    .flatten()
                    .map(|j| med_cpu(j) / server_cpu),
                server_cpu_s_per_gb: server_cpu,
                server_system_share: median_of(|s| s.server_system_share),
                backend_cpu_s_per_gb: median_of(|s| s.backend_cpu_s_per_gb),
                watched_cpu_s_per_gb: watch
                    .iter()
                    .enumerate()
                    .filter_map(|(k, w)| {
                        let per_gb = median_of_present(
                            samples[i]
                                .iter()
                                .map(|s| s.watched_cpu_s_per_gb.get(k).copied()),
                        )?;
                        Some((w.name.clone(), per_gb))
                    })
                    .collect(),
                client_cpu_s_per_gb: per_gb(|s| s.client_cpu_s_per_gb),
                cipher_seal_cpu_s_per_gb: cipher,
                server_over_cipher: server_cpu / cipher,
                serial_fraction: serial,
                amdahl_bound: serial.map(|s| libcolor::amdahl_bound(s, config.cpus)),
                clients_share_server_cpus: config.cpus >= machine_cpus,
            }
        })
        .collect()
}

pub(super) fn print_table(rows: &[Row]) {
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    println!(
        "{:<23} {:>4} {:>7} {:>10} {:>21} {:>9} {:>9} {:>9} {:>11} {:>11} {:>8} {:>6} {:>7} {:>7}  note",
        "mode",
        "cpus",
        "clients",
        "MB/s",
        "spread (min-max)",
        "vs uni1",
        "mp/ncopy",
        "mp/this",
        "cpu-s/GB",
        "cpu mp/this",
        "x cipher",
        "kern%",
        "serial%",
        "amdahl"
    );
    for r in rows {
        println!(
            "{:<23} {:>4} {:>7} {:>10.0} {:>10.0} - {:<8.0} {:>9} {:>9} {:>9} {:>11.2} {:>11} {:>8.2} {:>6} {:>7} {:>7}  {}",
            r.mode.name(),
            r.cpus,
            r.clients,
            r.mb_per_s,
            r.mb_per_s_min,
            r.mb_per_s_max,
            opt(r.speedup_vs_uni1, 2),
            opt(r.mp_over_ncopy, 3),
            opt(r.mp_over_this, 2),
            r.server_cpu_s_per_gb,
            opt(r.mp_cpu_over_this, 2),
            r.server_over_cipher,
            opt(r.server_system_share.map(|s| s * 100.0), 0),
            opt(r.serial_fraction.map(|s| s * 100.0), 1),
            opt(r.amdahl_bound, 2),
            row_note(r),
        );
    }
    for line in aim_lines(rows) {
        println!("{line}");
    }
}

/// Issue 27's aim, one line per nginx row with sfsd's cipher family: sfsd `mp` should spend
/// at most half nginx's CPU per byte.
fn aim_lines(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter(|r| matches!(r.mode, Mode::NginxChacha20 | Mode::NginxAes256Gcm))
        .filter_map(|r| {
            let ratio = r.mp_cpu_over_this?;
            Some(format!(
                "sfsd mp cpu-s/GB / {} cpu-s/GB on {} CPU(s): {ratio:.2} (aim: at most 0.50, {})",
                r.mode.name(),
                r.cpus,
                if ratio <= 0.5 { "met" } else { "not met" }
            ))
        })
        .collect()
}

/// The note column: what the numbers do not show.
fn row_note(r: &Row) -> String {
    let mut notes = Vec::new();
    if r.clients_share_server_cpus {
        notes.push("clients share the server's CPUs".to_string());
    }
    if let Some(g) = r.backend_cpu_s_per_gb {
        notes.push(format!("NFS-Ganesha: {g:.2} cpu-s/GB more"));
    }
    if !r.watched_cpu_s_per_gb.is_empty() {
        let each: Vec<String> = r
            .watched_cpu_s_per_gb
            .iter()
            .map(|(name, g)| format!("{name} {g:.2}"))
            .collect();
        notes.push(format!("cpu-s/GB more: {}", each.join(", ")));
    }
    notes.join("; ")
}

pub(super) fn human_bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.0} MiB", n as f64 / (1u64 << 20) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(mb_per_s: f64, server_cpu_s_per_gb: f64, system: Option<f64>) -> Sample {
        Sample {
            mb_per_s,
            server_cpu_s_per_gb,
            server_system_share: system,
            backend_cpu_s_per_gb: system.map(|s| s * 10.0),
            watched_cpu_s_per_gb: Vec::new(),
            client_cpu_s_per_gb: 0.1,
            serial_fraction: system.map(|s| s / 2.0),
        }
    }

    #[test]
    fn rows_hold_medians_and_the_ratios_between_configurations() {
        let configs = [
            Config {
                mode: Mode::Uni,
                cpus: 1,
            },
            Config {
                mode: Mode::Mp,
                cpus: 2,
            },
            Config {
                mode: Mode::Ncopy,
                cpus: 2,
            },
            Config {
                mode: Mode::SftpChacha20,
                cpus: 2,
            },
        ];
        let samples = vec![
            vec![sample(100.0, 1.0, Some(0.4)), sample(120.0, 3.0, Some(0.6))],
            vec![
                sample(180.0, 0.9, Some(0.5)),
                sample(150.0, 0.7, Some(0.7)),
                sample(210.0, 0.8, Some(0.9)),
            ],
            vec![sample(200.0, 0.8, None)],
            vec![sample(60.0, 4.0, None)],
        ];
        let rows = summarise(
            &configs,
            &samples,
            (4, 2),
            (Cipher::ChaCha20Poly1305, 0.4),
            &[],
        );
        let uni = &rows[0];
        assert_eq!(
            (uni.mb_per_s, uni.mb_per_s_min, uni.mb_per_s_max),
            (110.0, 100.0, 120.0)
        );
        assert_eq!(uni.server_cpu_s_per_gb, 2.0);
        assert_eq!(uni.server_over_cipher, 5.0);
        assert!((uni.server_system_share.unwrap() - 0.5).abs() < 1e-12);
        assert!(!uni.clients_share_server_cpus);
        let mp = &rows[1];
        assert_eq!(mp.mb_per_s, 180.0);
        assert_eq!(mp.speedup_vs_uni1, Some(180.0 / 110.0));
        assert_eq!(mp.mp_over_ncopy, Some(0.9));
        assert_eq!(mp.server_cpu_s_per_gb, 0.8);
        assert_eq!(mp.server_system_share, Some(0.7));
        assert_eq!(mp.serial_fraction, Some(0.35));
        assert_eq!(mp.backend_cpu_s_per_gb, Some(7.0));
        assert_eq!(
            row_note(mp),
            "clients share the server's CPUs; NFS-Ganesha: 7.00 cpu-s/GB more"
        );
        assert_eq!(row_note(&rows[2]), "clients share the server's CPUs");
        assert_eq!(rows[2].backend_cpu_s_per_gb, None);
        assert_eq!(mp.mp_over_this, None);
        assert!(mp.clients_share_server_cpus);
        assert_eq!((mp.clients, mp.reps), (4, 3));
        assert_eq!(rows[2].server_system_share, None, "no share measured");
        assert_eq!(rows[2].mp_over_ncopy, None);
        assert_eq!(rows[2].serial_fraction, None);
        assert_eq!(
            rows[3].mp_over_this,
            Some(3.0),
            "mp moves 3x what the peer does"
        );
        assert_eq!(
            rows[3].mp_cpu_over_this,
            Some(0.2),
            "same family: 0.8 / 4.0"
        );
        assert_eq!(mp.mp_cpu_over_this, None, "not a peer");
    }

    #[test]
    fn cpu_ratios_compare_only_the_cipher_family_sfsd_used() {
        let configs = [
            Config {
                mode: Mode::Mp,
                cpus: 1,
            },
            Config {
                mode: Mode::NginxChacha20,
                cpus: 1,
            },
            Config {
                mode: Mode::NginxAes256Gcm,
                cpus: 1,
            },
        ];
        let samples = vec![
            vec![sample(1000.0, 0.6, None)],
            vec![sample(500.0, 2.0, None)],
            vec![sample(800.0, 1.0, None)],
        ];
        let rows = summarise(&configs, &samples, (4, 2), (Cipher::Aes256Gcm, 0.3), &[]);
        assert_eq!(rows[1].mp_cpu_over_this, None, "ChaCha20 against AES");
        assert_eq!(rows[2].mp_cpu_over_this, Some(0.6));
        assert_eq!(rows[2].mp_over_this, Some(1.25));
        assert_eq!(
            aim_lines(&rows),
            [
                "sfsd mp cpu-s/GB / nginx-aes256-gcm cpu-s/GB on 1 CPU(s): 0.60 (aim: at most 0.50, not met)"
            ]
        );
        let rows = summarise(
            &configs,
            &samples,
            (4, 2),
            (Cipher::ChaCha20Poly1305, 0.3),
            &[],
        );
        assert_eq!(rows[1].mp_cpu_over_this, Some(0.3));
        assert_eq!(rows[2].mp_cpu_over_this, None);
        assert!(aim_lines(&rows)[0].ends_with("0.30 (aim: at most 0.50, met)"));
    }

    #[test]
    fn watched_processes_get_a_median_per_byte_each_in_the_note() {
        let configs = [Config {
            mode: Mode::Mp,
            cpus: 1,
        }];
        let with = |g: f64, b: f64| Sample {
            watched_cpu_s_per_gb: vec![g, b],
            ..sample(100.0, 1.0, None)
        };
        let samples = vec![vec![with(1.0, 4.0), with(3.0, 5.0), with(2.0, 9.0)]];
        let watch = [
            parse_watch("ganesha=10").unwrap(),
            parse_watch("gluster=11").unwrap(),
        ];
        let rows = summarise(&configs, &samples, (4, 2), (Cipher::Aes256Gcm, 0.3), &watch);
        assert_eq!(
            rows[0].watched_cpu_s_per_gb,
            [("ganesha".to_string(), 2.0), ("gluster".to_string(), 5.0)]
        );
        assert_eq!(
            row_note(&rows[0]),
            "cpu-s/GB more: ganesha 2.00, gluster 5.00"
        );
        assert_eq!(
            parse_watch("ganesha=42"),
            Ok(Watch {
                name: "ganesha".into(),
                pid: 42
            })
        );
        assert!(parse_watch("ganesha").is_err());
        assert!(parse_watch("=42").is_err());
        assert!(parse_watch("ganesha=x").is_err());
    }
}
