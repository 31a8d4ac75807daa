//! `lifeboat-sim`: runs randomized schedules of the Cluster controller against the in-memory API
//! (see the crate documentation), then plants each known bug and shows a schedule catches it.
//! `cargo xtask sim` runs it; CI runs it with 10,000 schedules.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Parser;
use lifeboat_operator::mutation::{self, Mutation};
use lifeboat_sim::harness::{self, Outcome};

#[derive(Parser)]
#[command(
    name = "lifeboat-sim",
    about = "Randomized schedules of Lifeboat's Cluster controller"
)]
struct Args {
    /// How many schedules (seeds `--first`, `--first + 1`, ...).
    #[arg(long, default_value_t = 10_000)]
    schedules: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Random steps per schedule, before faults stop.
    #[arg(long, default_value_t = 60)]
    steps: usize,
    /// Replay one seed and print its trace.
    #[arg(long)]
    seed: Option<u64>,
    /// Worker threads; one per core by default.
    #[arg(long)]
    threads: Option<usize>,
    /// Schedules tried per planted bug before it counts as missed; 0 skips the mutation proof.
    #[arg(long, default_value_t = 2_000)]
    mutation_budget: u64,
}

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lifeboat-sim: cannot start a runtime: {e}");
            std::process::exit(2);
        }
    }
}

fn replay_line(o: &Outcome, steps: usize) -> String {
    format!("cargo xtask sim --seed {} --steps {steps}", o.seed)
}

/// Runs seeds on `threads` threads until they are done or one breaks an invariant; the first
/// failing outcome (lowest seed among those seen) and the counts.
fn run_seeds(
    first: u64,
    n: u64,
    steps: usize,
    threads: usize,
) -> (Option<Outcome>, u64, usize, [u64; 7]) {
    let next = Arc::new(AtomicU64::new(first));
    let stop = Arc::new(AtomicBool::new(false));
    let reconciles = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let phases = Arc::new(Mutex::new([0u64; 7]));
    let failure: Arc<Mutex<Option<Outcome>>> = Arc::default();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (next, stop, reconciles, done, phases, failure) = (
                next.clone(),
                stop.clone(),
                reconciles.clone(),
                done.clone(),
                phases.clone(),
                failure.clone(),
            );
            std::thread::spawn(move || {
                let rt = runtime();
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= first + n || stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let o = rt.block_on(harness::run(seed, steps));
                    reconciles.fetch_add(o.reconciles, Ordering::Relaxed);
                    done.fetch_add(1, Ordering::Relaxed);
                    if o.violation.is_some() {
                        stop.store(true, Ordering::Relaxed);
                        let mut f = failure
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if f.as_ref().is_none_or(|prev| prev.seed > o.seed) {
                            *f = Some(o);
                        }
                        return;
                    }
                    let slot = match o.final_phase.as_deref() {
                        Some("Completed") => 0,
                        Some("Failed") => 1,
                        _ => 2,
                    };
                    let backup = match o.backup_phase.as_deref() {
                        Some("Completed") => 3,
                        Some("Failed") => 4,
                        _ => 5,
                    };
                    let mut p = phases
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    p[slot] += 1;
                    p[backup] += 1;
                    p[6] += o.backup_jobs as u64;
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let f = failure
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let p = *phases
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    (
        f,
        done.load(Ordering::Relaxed),
        reconciles.load(Ordering::Relaxed),
        p,
    )
}

fn main() {
    let args = Args::parse();
    let threads = args
        .threads
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);
    if let Some(seed) = args.seed {
        let o = runtime().block_on(harness::run(seed, args.steps));
        println!(
            "seed {seed}: {} reconciles, final phase {:?}",
            o.reconciles, o.final_phase
        );
        for (i, l) in o.trace.iter().enumerate() {
            println!("{i:4}  {l}");
        }
        match o.violation {
            Some(v) => {
                println!("VIOLATION: {v}");
                std::process::exit(1);
            }
            None => println!("every invariant held"),
        }
        return;
    }

    let started = Instant::now();
    let (failure, done, reconciles, phases) =
        run_seeds(args.first, args.schedules, args.steps, threads);
    let secs = started.elapsed().as_secs_f64();
    println!(
        "sim: {done} schedules ({reconciles} reconciles) in {secs:.1}s on {threads} threads: {:.0} schedules/s; restores ended Completed {}, Failed {}, other {}",
        done as f64 / secs.max(1e-9),
        phases[0],
        phases[1],
        phases[2]
    );
    println!(
        "sim: the Cluster's Backup ended Completed {}, Failed {}, absent {}; {} backup Jobs started",
        phases[3], phases[4], phases[5], phases[6]
    );
    if let Some(o) = failure {
        println!(
            "sim: seed {} broke an invariant: {}",
            o.seed,
            o.violation.clone().unwrap_or_default()
        );
        println!(
            "sim: replay with `{}`; its trace:",
            replay_line(&o, args.steps)
        );
        for (i, l) in o.trace.iter().enumerate() {
            println!("{i:4}  {l}");
        }
        std::process::exit(1);
    }

    if args.mutation_budget == 0 {
        return;
    }
    let mut missed = Vec::new();
    println!(
        "sim: planted bugs, each alone, {} schedules at most:",
        args.mutation_budget
    );
    for m in Mutation::ALL {
        mutation::set(Some(m));
        let t = Instant::now();
        let (caught, tried, _, _) = run_seeds(0, args.mutation_budget, args.steps, threads);
        mutation::set(None);
        match caught {
            Some(o) => println!(
                "sim:   {m:?}: caught by seed {} after {tried} schedules ({:.1}s): {}",
                o.seed,
                t.elapsed().as_secs_f64(),
                o.violation.unwrap_or_default()
            ),
            None => {
                println!("sim:   {m:?}: NOT caught in {tried} schedules");
                missed.push(m);
            }
        }
    }
    if !missed.is_empty() {
        println!("sim: planted bugs not caught: {missed:?}");
        std::process::exit(1);
    }
}
