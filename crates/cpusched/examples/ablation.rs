//! The CFS-v study's four cells with the host's 3.x details switched on
//! one at a time (`Platform::load_tracking`, `Platform::next_buddy`):
//! `cargo run --release -p cpusched --example ablation`.

use cpusched::cfsv::CfsvOptions;
use cpusched::cfsv_study::{run, Case, StudySetup};
use cpusched::FairKind;
fn main() {
    for case in [Case::Separate, Case::Mixed] {
        for (lt, nb) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut out = format!("{} tracking={lt} buddy={nb}:", case.name());
            for h in [FairKind::Cfs, FairKind::CfsV(CfsvOptions::default())] {
                let mut s = StudySetup::new(case, h);
                s.platform.load_tracking = lt;
                s.platform.next_buddy = nb;
                let r = run(&s).unwrap();
                out += &format!(
                    " {} iops {:.0} hash {:.0} vm1cpu {:.0}%;",
                    h.name(),
                    r.iops(),
                    r.hash_mb_s(),
                    r.vms[0].cpu_pct
                );
            }
            println!("{out}");
        }
    }
}
