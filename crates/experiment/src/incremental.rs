//! A run's results written as its cells finish, so that a run stopped halfway (Ctrl-C,
//! SIGTERM, a crash) keeps what it measured: `results.csv` gets each cell's row the
//! moment the cell is done, `results.json` is rewritten with the cells done so far
//! (at most every [`JSON_EVERY`], and when the run ends), marked incomplete until
//! the last cell is in. At the end the whole output directory is written by
//! [`write_outputs`], in matrix order.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cell::Cell;
use crate::naming::{result_stat_file_name, stat_file_name};
use crate::output::{
    csv_header, csv_profile_fields, csv_record, csv_writer, stat_file_paths_of, write_outputs,
    write_results_json, CSV_PROFILE_COLUMNS,
};
use crate::provenance::{utc_now, Provenance};
use crate::result::{CellResult, RunMeta};

/// Shortest time between two rewrites of `results.json` during a run: rewriting it
/// costs time in proportion to the cells done, `results.csv` already has every row,
/// and two seconds is as much as a stopped run can lose from the JSON.
pub const JSON_EVERY: Duration = Duration::from_secs(2);

/// Checks that `dir` can take a run's outputs, before any work: creates it (and its
/// parents) if missing, and creates and removes a probe file in it. Errors name the
/// path: a file where the directory should be, a read-only place, no space.
pub fn prepare_out_dir(dir: &Path) -> io::Result<()> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
    if dir.exists() && !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{}: exists and is not a directory", dir.display()),
        ));
    }
    std::fs::create_dir_all(dir).map_err(named)?;
    let probe = dir.join(format!(".tandem-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(named)?;
    std::fs::remove_file(&probe).map_err(named)
}

/// The results a run writes, in order: each cell repeated once per row it
/// gives ([`crate::latency::results_per_cell`]: one, two for a latency cell,
/// three for a profile cell, eight for a readers-hashers cell); the
/// `planned` of [`IncrementalWriter::create`].
pub fn planned(cells: &[Cell]) -> Vec<Cell> {
    cells
        .iter()
        .flat_map(|c| std::iter::repeat_n(c.clone(), crate::latency::results_per_cell(c)))
        .collect()
}

/// The slot of each cell's first row among [`planned`]`(cells)`.
pub fn first_slots(cells: &[Cell]) -> Vec<usize> {
    cells
        .iter()
        .scan(0, |next, c| {
            let first = *next;
            *next += crate::latency::results_per_cell(c);
            Some(first)
        })
        .collect()
}

/// Writes a run's results as its cells finish (see the module's documentation).
pub struct IncrementalWriter {
    dir: PathBuf,
    meta: RunMeta,
    provenance: Provenance,
    csv: csv::Writer<File>,
    stat_paths: Vec<String>,
    /// Whether the rows carry [`CSV_PROFILE_COLUMNS`].
    profiles: bool,
    done: Vec<Option<CellResult>>,
    last_json: Instant,
}

impl IncrementalWriter {
    /// Starts the output of a run of `planned` cells in `dir` (see
    /// [`prepare_out_dir`]): `results.csv` with its header, `results.json` with no
    /// cell and `complete: false`.
    pub fn create(
        dir: &Path,
        meta: RunMeta,
        provenance: Provenance,
        planned: &[Cell],
    ) -> io::Result<IncrementalWriter> {
        let path = dir.join("results.csv");
        let file = File::create(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let mut csv = csv_writer(file);
        let profiles = planned.iter().any(|c| c.profile.is_some());
        let mut header = csv_header();
        if profiles {
            header.extend_from_slice(CSV_PROFILE_COLUMNS);
        }
        csv.write_record(header)?;
        csv.flush()?;
        let mut w = IncrementalWriter {
            dir: dir.to_path_buf(),
            meta,
            provenance,
            csv,
            stat_paths: stat_file_paths_of(planned.iter()),
            profiles,
            done: vec![None; planned.len()],
            last_json: Instant::now(),
        };
        w.write_json()?;
        Ok(w)
    }

    /// Records the result of planned cell `index`: its row goes to `results.csv` at
    /// once, `results.json` follows within [`JSON_EVERY`].
    pub fn push(&mut self, index: usize, result: CellResult) -> io::Result<()> {
        // A planned cell's path names its first metric; the latency benchmark's
        // second (`latency_max_us`) has a file of its own.
        let path = self.stat_paths[index].replace(
            &stat_file_name(&result.cell),
            &result_stat_file_name(&result.cell, result.metric),
        );
        let mut record = csv_record(&result, &path);
        if self.profiles {
            record.extend(csv_profile_fields(&result.cell));
        }
        self.csv.write_record(record)?;
        self.csv.flush()?;
        self.done[index] = Some(result);
        if self.last_json.elapsed() >= JSON_EVERY {
            self.write_json()?;
        }
        Ok(())
    }

    /// Replaces the run's `meta.extra` (the provenance is kept): for a runner
    /// that learns more about the run as it goes (the real runner's machine,
    /// guest and failed cells), written with the next `results.json`.
    pub fn set_extra(&mut self, extra: serde_json::Map<String, serde_json::Value>) {
        self.meta.extra = extra;
        self.meta.set_provenance(&self.provenance);
    }

    /// Rewrites `results.json` now, whatever [`JSON_EVERY`] says: for a runner
    /// whose cells take minutes (the real runner), after each cell, so that
    /// a run that dies loses no finished cell from the JSON either.
    pub fn checkpoint(&mut self) -> io::Result<()> {
        self.write_json()
    }

    /// The results recorded so far, in planned order.
    pub fn results(&self) -> impl Iterator<Item = &CellResult> {
        self.done.iter().flatten()
    }

    /// How many planned cells have their result.
    pub fn cells_done(&self) -> usize {
        self.results().count()
    }

    /// Ends the run: writes every output for the cells done ([`write_outputs`]),
    /// complete when every planned cell is in and no signal stopped the run.
    /// Returns the files written and the results, in planned order.
    pub fn finish(
        mut self,
        interrupted_by: Option<&str>,
    ) -> io::Result<(Vec<PathBuf>, Vec<CellResult>)> {
        self.csv.flush()?;
        self.provenance.finished = Some(utc_now());
        self.stamp(interrupted_by);
        let results: Vec<CellResult> = self.done.into_iter().flatten().collect();
        let written = write_outputs(&self.dir, &self.meta, &results)?;
        Ok((written, results))
    }

    /// Brings the provenance up to date; `finished` only once the run ends.
    fn stamp(&mut self, ended: Option<&str>) {
        let done = self.cells_done();
        self.provenance.cells_done = done;
        self.provenance.complete = ended.is_none() && done == self.done.len();
        self.provenance.interrupted_by = ended.map(str::to_string);
        self.meta.set_provenance(&self.provenance);
    }

    /// Rewrites `results.json` (through a temporary file, so that a reader never
    /// sees half of one) with the cells done so far, marked incomplete.
    fn write_json(&mut self) -> io::Result<()> {
        self.stamp(None);
        self.provenance.complete = false;
        self.meta.set_provenance(&self.provenance);
        let results: Vec<&CellResult> = self.results().collect();
        let tmp = self.dir.join(".results.json.partial");
        let mut file = io::BufWriter::new(File::create(&tmp)?);
        write_results_json(&mut file, &self.meta, &results)?;
        io::Write::flush(&mut file)?;
        drop(file);
        std::fs::rename(&tmp, self.dir.join("results.json"))?;
        self.last_json = Instant::now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{Metric, RunResult};
    use crate::{Accepted, Scenario};

    fn cells() -> Vec<Cell> {
        Scenario::from_toml_str(
            "name = \"t\"\nbenchmark = \"startup\"\napp = \"bash\"\n[matrix]\ndevice = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\", \"noop\", \"cfq\"]\nhost_workload = [\"none\"]\n",
            &Accepted {
                devices: vec!["hdd-1.8in".parse().unwrap()],
                host_scheds: vec!["bfq".parse().unwrap(), "noop".parse().unwrap(), "cfq".parse().unwrap()],
                guest_scheds: Vec::new(),
                coordination: vec!["off".parse().unwrap()],
                apps: vec!["bash".into()],
                allow_cmd_apps: false,
                allow_vm: false,
            },
        )
        .unwrap()
        .cells()
    }

    fn result(cell: &Cell, v: f64) -> CellResult {
        CellResult {
            cell: cell.clone(),
            runner: "sim".into(),
            metric: Metric::StartupS,
            runs: vec![RunResult {
                values: vec![v],
                ..Default::default()
            }],
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tandem-incr-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn rows_are_written_as_cells_finish_and_a_stop_is_marked() {
        let dir = tmp("stop");
        prepare_out_dir(&dir).unwrap();
        let cells = cells();
        let p = Provenance::start("0", "abc", vec!["tandem".into()], cells.len());
        let mut w = IncrementalWriter::create(&dir, RunMeta::default(), p, &cells).unwrap();
        let rows = || std::fs::read_to_string(dir.join("results.csv")).unwrap();
        assert_eq!(rows().lines().count(), 1, "the header alone");
        // cells finish out of order
        w.push(2, result(&cells[2], 3.0)).unwrap();
        assert_eq!(rows().lines().count(), 2);
        assert!(rows().lines().nth(1).unwrap().contains(",cfq,"));
        w.push(0, result(&cells[0], 1.0)).unwrap();
        assert_eq!(rows().lines().count(), 3);
        let (_, results) = w.finish(Some("SIGINT")).unwrap();
        assert_eq!(results.len(), 2);
        let (meta, back) = crate::output::read_results_json(&dir.join("results.json")).unwrap();
        let p = meta.provenance().unwrap();
        assert!(!p.complete);
        assert_eq!((p.cells_planned, p.cells_done), (3, 2));
        assert_eq!(p.interrupted_by.as_deref(), Some("SIGINT"));
        assert!(p.finished.is_some());
        // in matrix order at the end
        assert_eq!(back[0].cell.host_sched.name(), "bfq");
        assert_eq!(back[1].cell.host_sched.name(), "cfq");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_checkpoint_writes_the_json_at_once_with_the_extra_given() {
        let dir = tmp("checkpoint");
        prepare_out_dir(&dir).unwrap();
        let cells = cells();
        let p = Provenance::start("0", "abc", Vec::new(), cells.len());
        let mut w = IncrementalWriter::create(&dir, RunMeta::default(), p, &cells).unwrap();
        // Within JSON_EVERY of the create: a push alone leaves the JSON as it was.
        w.push(0, result(&cells[0], 1.0)).unwrap();
        let json = || crate::output::read_results_json(&dir.join("results.json")).unwrap();
        if w.last_json.elapsed() < JSON_EVERY {
            assert!(json().1.is_empty());
        }
        let mut extra = serde_json::Map::new();
        extra.insert("failed_cells".into(), serde_json::json!([{"cell": "x"}]));
        w.set_extra(extra);
        w.checkpoint().unwrap();
        let (meta, back) = json();
        assert_eq!(back.len(), 1);
        assert_eq!(meta.extra["failed_cells"][0]["cell"], "x");
        // The provenance survives the new extra.
        let p = meta.provenance().unwrap();
        assert_eq!((p.cells_done, p.complete), (1, false));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_finished_run_is_complete() {
        let dir = tmp("complete");
        prepare_out_dir(&dir).unwrap();
        let cells = cells();
        let p = Provenance::start("0", "abc", Vec::new(), cells.len());
        let mut w = IncrementalWriter::create(&dir, RunMeta::default(), p, &cells).unwrap();
        for (i, c) in cells.iter().enumerate() {
            w.push(i, result(c, 1.0 + i as f64)).unwrap();
        }
        w.finish(None).unwrap();
        let (meta, _) = crate::output::read_results_json(&dir.join("results.json")).unwrap();
        assert!(meta.provenance().unwrap().complete);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unusable_out_dirs_are_named() {
        let file = tmp("file");
        std::fs::write(&file, "x").unwrap();
        let e = prepare_out_dir(&file).unwrap_err().to_string();
        assert!(e.contains("exists and is not a directory"), "{e}");
        let e = prepare_out_dir(&file.join("sub")).unwrap_err().to_string();
        assert!(e.contains(&file.display().to_string()), "{e}");
        std::fs::remove_file(&file).unwrap();
        // /proc takes no new directories, even from root
        assert!(prepare_out_dir(Path::new("/proc/tandem-out")).is_err());
    }
}
