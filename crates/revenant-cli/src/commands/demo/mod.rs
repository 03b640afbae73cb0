//! `revenant demo`: the design's Friday outage, end to end, on the embedded SQLite
//! default in a temporary directory.
//!
//! - [`provider`]: the fake email provider on loopback, on a thread of its own (503
//!   while down and over its rate limit, 422 for the restaurant its template cannot
//!   render, dedup by `Idempotency-Key`);
//! - [`stamped`]: the `http` kind with each request's send time stamped on it;
//! - [`scenario`]: the story in simulated time and the time scale;
//! - [`live`]: the status line while it runs;
//! - [`report`]: the figures, the table beside `revenant_sim`'s prediction, the chart.
//!
//! Receipts are enqueued as `http` jobs at `--rate` per simulated second, in small
//! batches (one store call every [`ENQUEUE_TICK`]). A real worker (the runtime, the
//! `http` kind) delivers them to the provider with revenant's default policy, its
//! durations divided by the scale.
//!
//! **The breaker.** The receipts name their dependency (`email-provider`) and the
//! worker protects it as `revenant work` does: a circuit breaker, a rate limit (94% of
//! the provider's 50 requests a second: see [`scenario::RATE_LIMIT_SHARE`]) and a retry
//! budget, every duration divided by the scale and every rate multiplied by it. While
//! the provider is down, receipts are parked without spending attempts and one probe
//! at a time tests it; when a probe gets through, the backlog is released at the rate
//! limit. `--no-breaker` plays the story without any of it, as before.
//!
//! **The time scale.** With the breaker, one real second is 30 simulated seconds by
//! default ([`SCALE_WITH_BREAKER`], which says why not 60): the story and its 7-minute
//! drain take about 80 s. Without it (`--no-breaker`), one real second is one
//! simulated minute (`--scale 60`), the example: the 30-minute outage takes
//! 30 s, the drain that follows
//! (the default policy's backoff is capped at 1 h, so the last receipts come back
//! about 40 simulated minutes after recovery) about 20 to 40 s, and the whole demo
//! about 75 s. Only a scale of 40 or more fits the story in two minutes. At 60x the
//! outage asks for 660 enqueues and about 4,600 attempts (each a claim, an HTTP request
//! and a result written to SQLite) a real second. The SQLite store claims and writes
//! results a batch per statement on one warm writer connection, which keeps up on the
//! 2-core VM this was built on (6.76 requests per fresh receipt measured against 7.00
//! predicted, with other builds running). On a slower or busier machine the worker can
//! fall behind: retries run late and the provider sees fewer requests than the
//! simulator predicts. The demo says so (`kept_up`, and a note under the table) rather
//! than hiding it; nothing is lost or delivered twice either way.
//!
//! **The fastest scales.** The defaults are also the most the demo accepts: 30x with
//! the breaker ([`scenario::MAX_SCALE_WITH_BREAKER`]: at 60x its own check of the
//! provider's limit after recovery failed on that VM) and 60x without
//! ([`scenario::MAX_SCALE_WITHOUT_BREAKER`]). A faster `--scale` is refused with the
//! reason rather than played into checks that fail for the machine's sake.

mod hang;
mod live;
mod provider;
mod report;
mod scenario;
mod stamped;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use revenant::duration::parse;
use revenant::sqlite::SqliteStore;
use revenant::store::{DependencyListParams, JobFilter, JobGetParams, QueueStatsParams};
use revenant::{
    Client, DeadReason, DeadSelection, InputError, JobId, JobState, NewJob, PolicySet,
    RedriveRequest, Store,
};
use revenant_kinds::HttpHandler;
use serde::Serialize;

use crate::commands::protection::ProtectionArgs;
use crate::error::CliError;
use crate::output;

use live::{LiveView, Status};
use provider::{Provider, Receipt, POISON_RESTAURANT};
use scenario::{Scenario, SimClock, DEPENDENCY, POISON_RECEIPT};

/// The queue the receipts go to.
const QUEUE: &str = "emails";

/// How often the producer enqueues the receipts that have arrived since its last
/// call, in real time: 20 ms is 1.2 simulated seconds at the default scale, so
/// arrivals stay close to evenly spaced while the producer makes 50 store calls a
/// second rather than 660.
const ENQUEUE_TICK: Duration = Duration::from_millis(20);

/// How often the live view and the depth samples are refreshed, in real time.
const VIEW_TICK: Duration = Duration::from_millis(250);

/// How often an idle fetcher looks for retries that came due, in real time: 5 ms is
/// 0.3 simulated seconds at the default scale, against a first backoff of 5 to 10
/// simulated seconds. The claim cooldown is the same.
const POLL: Duration = Duration::from_millis(5);

/// The default time scale with the breaker. After recovery the worker sends 47 paced
/// requests per simulated second; the machine bunches sends by a few milliseconds now
/// and then (on the 2-core VM this was built on, with other builds running, one 1 ms
/// sleep in a thousand overshot by 9 ms), which at 60x is half a simulated second and
/// at 30x a quarter. 30x plays the story (31 minutes, then about 7 to drain) in about
/// 80 s.
const SCALE_WITH_BREAKER: f64 = scenario::MAX_SCALE_WITH_BREAKER;

/// The default time scale without the breaker: its drain takes about 40 simulated
/// minutes, so only 60x fits the story in two minutes.
const SCALE_WITHOUT_BREAKER: f64 = scenario::MAX_SCALE_WITHOUT_BREAKER;

/// `revenant demo`: the defaults are the design's story.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// How long the provider answers 503, in simulated time.
    #[arg(long, default_value = "30m")]
    pub outage: String,
    /// Simulated seconds per real second: 60 plays a simulated minute in one real
    /// second. The policy's durations are divided by it. Default and most: 30 with the
    /// breaker, 60 with --no-breaker (faster, the demo's own checks fail on a 2-core
    /// machine; see the module docs).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Receipts per simulated second.
    #[arg(long, default_value_t = 11.0)]
    pub rate: f64,
    /// Jobs the worker runs at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Write the chart here. Default: a new file in the system's temporary directory,
    /// `revenant-demo-XXXXXX.svg`; its path is printed at the end.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Keep the temporary directory (and its database) and print its path.
    #[arg(long)]
    pub keep: bool,
    /// Print the summary as JSON (the live view goes to standard error).
    #[arg(long)]
    pub json: bool,
    /// Requests per simulated second the provider allows; it answers 503 to the rest
    /// of each second. 0: no limit.
    #[arg(long, default_value_t = 50.0, allow_negative_numbers = true)]
    pub provider_limit: f64,
    /// How the worker protects the provider (simulated time). Without a
    /// `--rate-limit`, the rate limit is 96% of `--provider-limit`.
    #[command(flatten)]
    pub protection: ProtectionArgs,
    /// Play another story: a provider that hangs beside one that answers in 50 ms, in
    /// one queue of 10 slots, in real time (about 35 s), before and with the
    /// bulkhead and slow-call counting; prints the figures beside the simulator's.
    #[arg(long)]
    pub hang: bool,
    /// With `--hang`: run against this database (`sqlite://...` or `postgres://...`)
    /// instead of a temporary SQLite file. Each run uses a queue and dependency keys
    /// of its own.
    #[arg(long, value_name = "URL", requires = "hang")]
    pub database_url: Option<String>,
}

/// `revenant demo --hang`.
async fn run_hang(args: DemoArgs) -> Result<ExitCode, CliError> {
    let Some(policies) = args.protection.policies()? else {
        return Err(InputError::new(
            "no-breaker",
            "--hang compares the protections; leave out --no-breaker",
        )
        .into());
    };
    let dir = temporary_dir()
        .map_err(|err| CliError::Failed(format!("cannot make a temporary directory: {err}")))?;
    let (store, backend): (Arc<dyn Store>, String) = match &args.database_url {
        Some(url) => (
            revenant::connect(url).await?,
            url.split("://").next().unwrap_or("database").to_string(),
        ),
        None => (
            Arc::new(SqliteStore::open(&dir.path().join("revenant.db")).await?),
            "sqlite".to_string(),
        ),
    };
    let summary = hang::run(store, &backend, policies, args.json).await?;
    let g = &summary.goals;
    let ok = g.healthy_at_most_twice_alone_plus_window
        && g.hanging_held_at_most_its_limit
        && g.none_dead
        && g.backlog_delivered_at_its_rate;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The poison receipt, before and after the redrive.
#[derive(Debug, Serialize)]
struct Poison {
    receipt: u64,
    job_id: JobId,
    restaurant: &'static str,
    status_before_redrive: JobState,
    dead_reason_before_redrive: Option<DeadReason>,
    last_error_before_redrive: Option<String>,
    status_after_redrive: JobState,
    deliveries_after_redrive: u32,
}

/// Issue 8's figures, measured: what the breaker, the rate limit and the budget are
/// for. Reported, not part of the exit code (a busy machine can stretch the drain).
#[derive(Debug, Serialize)]
struct ProtectionChecks {
    /// While down, the provider received at most 0.1 requests per fresh receipt.
    outage_at_most_a_tenth_of_a_request_per_receipt: bool,
    /// No receipt was dead-lettered by the outage.
    none_dead_of_the_outage: bool,
    /// After recovery the provider refused nothing for being over its limit (its token
    /// bucket, the way providers enforce a limit: see the provider module), and the
    /// worker sent no more than the limit in any simulated second
    /// (`measured.recovery_peak_sent_rps`). The busiest second as the requests reached
    /// the provider (`measured.recovery_peak_rps`) is printed beside it but not held to
    /// the limit: on a loaded machine a few milliseconds of scheduling delay move
    /// requests into the next simulated second (33 ms at 30x) and read as a peak no
    /// sender caused; the bucket, which allows the provider's burst, is the judge.
    recovery_within_the_providers_limit: bool,
    /// The backlog was delivered within its size over the limit plus a minute.
    backlog_drained_in_time: bool,
    /// Times the breaker opened (from the store).
    breaker_trips: u64,
}

/// The checks that decide the exit code.
#[derive(Debug, Serialize)]
struct Checks {
    /// Every receipt's job completed (none lost, none left dead after the redrive).
    every_receipt_completed: bool,
    /// The provider accepted each receipt exactly once.
    every_receipt_delivered_exactly_once: bool,
    /// Receipts the provider never accepted.
    undelivered: Vec<u64>,
    /// Receipts the provider accepted more than once.
    delivered_twice: Vec<u64>,
}

#[derive(Debug, Serialize)]
struct Summary {
    scenario: Scenario,
    measured: report::Measured,
    simulated: revenant_sim::Report,
    poison: Poison,
    checks: Checks,
    /// With the breaker on: issue 8's figures.
    protection: Option<ProtectionChecks>,
    chart: PathBuf,
    database: Option<PathBuf>,
    /// The measured requests per fresh receipt while down are within 10% of the
    /// simulator's (or above): the machine kept up with the scaled schedule.
    kept_up: bool,
    wall_secs: f64,
}

/// Plays the story; exits 0 when every check passes, 1 otherwise.
pub async fn run(args: DemoArgs) -> Result<ExitCode, CliError> {
    if args.hang {
        return run_hang(args).await;
    }
    let began = Instant::now();
    // The receipts queue calls one provider: a bulkhead would keep nothing else safe,
    // and it costs the backlog its pace after recovery (jobs past the limit are
    // claimed and turned back over and over, and at 30x the worker pays for that
    // churn in real time: the backlog took 9m2s against 7m36s allowed on a quiet
    // 2-core machine with the default half of the slots, 7m34s without). So no
    // bulkhead unless a flag sets one; `--hang` shows it where it matters, beside a
    // second dependency.
    let mut protection = args.protection.policies()?.map(|p| p.default);
    if !args.protection.sets_bulkhead() {
        if let Some(policy) = &mut protection {
            policy.bulkhead = None;
        }
    }
    let limit = (args.provider_limit != 0.0).then_some(args.provider_limit);
    let scale = args.scale.unwrap_or(if protection.is_some() {
        SCALE_WITH_BREAKER
    } else {
        SCALE_WITHOUT_BREAKER
    });
    let scenario = Scenario::new(scale, args.rate, parse("outage", &args.outage)?)?
        .protected(limit, protection)?;
    if args.concurrency == 0 || args.concurrency > 10_000 {
        return Err(InputError::new("concurrency", "use 1..=10000").into());
    }
    let real_policy = scenario.real_policy()?;
    let dir = temporary_dir()
        .map_err(|err| CliError::Failed(format!("cannot make a temporary directory: {err}")))?;
    let db_path = dir.path().join("revenant.db");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db_path).await?);
    // The demo is a door like the others: its enqueues, its worker and its redrive go
    // through the client, with the scenario's (time-scaled) policy as the default.
    let client = Client::new(store.clone()).with_policies(PolicySet::new(real_policy));

    let mut view = LiveView::new(args.json);
    let p = &scenario.policy;
    view.say(&format!(
        "revenant demo: the Friday outage on embedded SQLite ({})",
        db_path.display()
    ));
    view.say(&format!(
        "time scale: {}; {} receipts per simulated second for {}; the provider answers 503 from 20:10 for {}",
        scenario.scale_text(),
        scenario.rate,
        revenant::duration::format(Duration::from_secs_f64(scenario.arrivals_for_secs)),
        revenant::duration::format(Duration::from_secs_f64(scenario.outage_secs)),
    ));
    view.say(&format!(
        "policy (simulated time): {} attempts, {} x{} capped at {}, jitter {}; receipt #{POISON_RECEIPT} is for {POISON_RESTAURANT:?}",
        p.max_attempts(),
        revenant::duration::format(p.backoff().base),
        p.backoff().multiplier,
        revenant::duration::format(p.backoff().cap),
        p.jitter(),
    ));
    let bulkhead = match scenario.protection.as_ref().and_then(|p| p.bulkhead) {
        None => "no bulkhead (the queue calls one provider)".to_string(),
        Some(b) => match b.max_in_flight {
            Some(n) => format!("bulkhead {n} attempts per worker"),
            None => format!("bulkhead: {}% of the slots", (b.share * 100.0).round()),
        },
    };
    view.say(&format!(
        "the provider allows {}; {}; {bulkhead}",
        scenario
            .provider_limit
            .map_or("any number of requests".to_string(), |l| format!(
                "{l} requests per simulated second"
            )),
        revenant_sim::table::protection(
            scenario
                .protection
                .as_ref()
                .unwrap_or(&revenant::dependency::DependencyPolicy::off())
        )
        .replace(
            "protection: ",
            &format!("the worker protects {DEPENDENCY:?}: ")
        )
    ));

    let clock = SimClock::start(scenario.scale);
    let mut builder = client.worker();
    if let Some(dependencies) = scenario.real_dependencies() {
        builder = builder.dependencies(dependencies);
    }
    let worker = builder
        .queue(QUEUE, args.concurrency)
        .handler(stamped::StampedHttp::new(
            // The fake provider listens on 127.0.0.1, which the http kind's outbound
            // policy refuses by default: the demo opens exactly that address.
            HttpHandler::builder()
                .allow_net("127.0.0.1/32")
                .map_err(|err| CliError::Failed(err.to_string()))?
                .build()
                .map_err(|err| CliError::Failed(err.to_string()))?,
            clock,
        ))
        .worker_id("revenant-demo")
        .poll_interval(POLL)
        .claim_cooldown(POLL)
        .shutdown_grace(Duration::from_secs(2))
        .build()
        .map_err(|err| InputError::new("worker", err.to_string()))?;
    let stop = worker.shutdown_handle();
    let worker_task = tokio::spawn(worker.run_until(std::future::pending()));

    let provider = Provider::start(&scenario, clock)
        .await
        .map_err(|err| CliError::Failed(format!("cannot start the fake provider: {err}")))?;
    let producer = tokio::spawn(produce(
        client.clone(),
        scenario.clone(),
        clock,
        provider.url(),
        real_policy.attempt_timeout(),
    ));

    // Watch until every receipt is enqueued and finished (completed or dead).
    let deadline_secs =
        scenario.arrivals_for_secs + real_policy.span().2.as_secs_f64() * scenario.scale + 120.0;
    let mut depth: Vec<(f64, i64)> = Vec::new();
    let mut window: Vec<(f64, u64)> = Vec::new();
    let mut status;
    let (dead_exhausted, dead_permanent);
    loop {
        tokio::time::sleep(VIEW_TICK).await;
        let now = clock.now();
        let stats = queue_stats(store.as_ref()).await?;
        let (requests, delivered) =
            provider.with_ledger(|l| (l.requests_between(0, usize::MAX), l.delivered()));
        window.push((now, requests));
        window.retain(|&(at, _)| at >= now - 60.0);
        let rps = match window.first() {
            Some(&(at, n)) if now - at > 1.0 => (requests - n) as f64 / (now - at),
            _ => 0.0,
        };
        let waiting = stats.ready + stats.scheduled + stats.retrying;
        depth.push((now, waiting));
        let breaker = if scenario.protection.is_some() {
            store
                .dependency_list(DependencyListParams {
                    dependency: Some(DEPENDENCY.to_string()),
                    now: None,
                })
                .await?
                .first()
                .map(|d| (d.breaker, d.waiting.breaker))
        } else {
            None
        };
        status = Status {
            sim_secs: now,
            provider_down: now >= scenario.outage_start_secs && now < scenario.outage_end_secs(),
            enqueued: (stats.ready
                + stats.scheduled
                + stats.retrying
                + stats.running
                + stats.completed
                + stats.dead) as u64,
            delivered,
            retrying: stats.retrying + stats.ready,
            dead: stats.dead,
            requests_per_sec: rps,
            breaker,
        };
        view.update(&status);
        let finished = producer.is_finished()
            && waiting + stats.running == 0
            && (stats.completed + stats.dead) as u64 >= scenario.receipts;
        if finished {
            dead_permanent = count_dead(store.as_ref(), DeadReason::Permanent).await?;
            dead_exhausted = stats.dead as u64 - dead_permanent.min(stats.dead as u64);
            break;
        }
        if now > deadline_secs {
            view.finish(&status);
            stop.shutdown();
            return Err(CliError::Failed(format!(
                "the queue did not drain within {} simulated: the machine cannot keep up at this scale; try --scale {}",
                revenant::duration::format(Duration::from_secs_f64(deadline_secs)),
                half_scale(scenario.scale)
            )));
        }
    }
    view.finish(&status);
    let ids = producer
        .await
        .map_err(|err| CliError::Failed(format!("the producer failed: {err}")))??;
    let ledger = provider.ledger();

    // The poison receipt: dead as permanent, with the provider's 422 as its reason.
    let poison_id = ids[POISON_RECEIPT as usize];
    let before = get(store.as_ref(), poison_id).await?;
    view.say(&format!(
        "receipt #{POISON_RECEIPT} (job {poison_id}, {POISON_RESTAURANT:?}) is {} ({}): {}",
        before.status.as_str(),
        before.dead_reason.map_or("-", |r| r.as_str()),
        before
            .last_error
            .as_ref()
            .map_or("-", |e| e.message.as_str()),
    ));
    view.say("the provider fixes its template; redriving the dead receipt");
    provider.fix_template();
    client
        .redrive(
            RedriveRequest {
                selection: DeadSelection {
                    filter: JobFilter {
                        ids: Some(vec![poison_id]),
                        ..JobFilter::default()
                    },
                    ..DeadSelection::default()
                },
                actor: Some("revenant demo".to_string()),
                note: Some("the provider fixed its template".to_string()),
                rate: None,
            },
            |_| {},
        )
        .await?;
    let redrive_deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let job = get(store.as_ref(), poison_id).await?;
        if job.status.is_terminal() || Instant::now() > redrive_deadline {
            break job;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let poison_deliveries =
        provider.with_ledger(|l| l.accepted.get(&POISON_RECEIPT).copied().unwrap_or(0));
    view.say(&format!(
        "receipt #{POISON_RECEIPT} after the redrive: {} (delivered {poison_deliveries} time{})",
        after.status.as_str(),
        if poison_deliveries == 1 { "" } else { "s" },
    ));

    stop.shutdown();
    match worker_task.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(CliError::Failed(format!("the worker failed: {err}"))),
        Err(err) => return Err(CliError::Failed(format!("the worker panicked: {err}"))),
    }

    // The checks, on the provider's ledger after the redrive and on the store.
    let final_ledger = provider.ledger();
    let final_stats = queue_stats(store.as_ref()).await?;
    let undelivered: Vec<u64> = (0..scenario.receipts)
        .filter(|r| !final_ledger.accepted.contains_key(r))
        .collect();
    let delivered_twice: Vec<u64> = final_ledger
        .accepted
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(&r, _)| r)
        .collect();
    let checks = Checks {
        every_receipt_completed: final_stats.completed as u64 == scenario.receipts
            && final_stats.dead == 0,
        every_receipt_delivered_exactly_once: undelivered.is_empty()
            && delivered_twice.is_empty()
            && final_ledger.accepted.len() as u64 == scenario.receipts,
        undelivered,
        delivered_twice,
    };

    let seconds = report::seconds(&scenario, &ledger, &depth);
    let measured = report::measure(
        &scenario,
        &ledger,
        &seconds,
        POISON_RECEIPT,
        dead_exhausted,
        dead_permanent,
    );
    let simulated = revenant_sim::simulate(&scenario.sim_config()?)?;
    let chart = match &args.chart {
        Some(path) => path.clone(),
        None => new_chart_file()
            .map_err(|err| CliError::Failed(format!("cannot make the chart's file: {err}")))?,
    };
    report::write_chart(&chart, &scenario, &measured, &seconds).map_err(|err| {
        CliError::Failed(format!(
            "cannot write the chart to {}: {err}",
            chart.display()
        ))
    })?;
    let database = if args.keep {
        Some(dir.keep().join("revenant.db"))
    } else {
        None
    };
    // The worker kept up when the provider saw what the simulator predicts, within
    // 10%; behind, retries run late and the provider sees fewer requests.
    // With the breaker, the load is the rate limit's; the worker kept up when it
    // delivered the backlog about as fast as the simulator says.
    let kept_up = if scenario.protection.is_some() {
        measured.backlog_drain_secs <= 1.1 * simulated.backlog_drain_secs + 30.0
    } else {
        measured.outage_requests_per_fresh_receipt >= 0.9 * simulated.outage.requests_per_fresh_job
    };
    let protection = match &scenario.protection {
        None => None,
        Some(_) => {
            let trips = store
                .dependency_list(DependencyListParams {
                    dependency: Some(DEPENDENCY.to_string()),
                    now: None,
                })
                .await?
                .first()
                .map_or(0, |d| d.trips);
            Some(ProtectionChecks {
                outage_at_most_a_tenth_of_a_request_per_receipt: measured
                    .outage_requests_per_fresh_receipt
                    <= 0.1,
                none_dead_of_the_outage: measured.dead_attempts_exhausted == 0,
                recovery_within_the_providers_limit: measured.over_limit == 0
                    && scenario
                        .provider_limit
                        .is_none_or(|limit| measured.recovery_peak_sent_rps as f64 <= limit),
                backlog_drained_in_time: measured
                    .backlog_drain_bound_secs
                    .is_none_or(|bound| measured.backlog_drain_secs <= bound),
                breaker_trips: trips,
            })
        }
    };
    let ok = checks.every_receipt_completed && checks.every_receipt_delivered_exactly_once;
    let summary = Summary {
        poison: Poison {
            receipt: POISON_RECEIPT,
            job_id: poison_id,
            restaurant: POISON_RESTAURANT,
            status_before_redrive: before.status,
            dead_reason_before_redrive: before.dead_reason,
            last_error_before_redrive: before.last_error.map(|e| e.message),
            status_after_redrive: after.status,
            deliveries_after_redrive: poison_deliveries,
        },
        scenario,
        measured,
        simulated,
        checks,
        protection,
        chart,
        database,
        kept_up,
        wall_secs: began.elapsed().as_secs_f64(),
    };

    if args.json {
        output::json(&summary)?;
    } else {
        println!();
        print!(
            "{}",
            report::table(&summary.scenario, &summary.measured, &summary.simulated)
        );
        println!();
        println!("chart written to {}", summary.chart.display());
        if let Some(db) = &summary.database {
            println!("database kept at {}", db.display());
        }
        println!(
            "no receipt lost: {}; each delivered exactly once: {}; wall time {:.1} s",
            yes_no(summary.checks.every_receipt_completed),
            yes_no(summary.checks.every_receipt_delivered_exactly_once),
            summary.wall_secs
        );
        if let Some(p) = &summary.protection {
            println!(
                "breaker ({} trip{}): at most 0.1 requests per fresh receipt while down: {}; none dead of the outage: {}; never over the provider's limit after recovery: {} (nothing refused by its bucket; busiest simulated second as received {}, as sent {}); backlog delivered within backlog / limit + 1 minute: {}",
                p.breaker_trips,
                if p.breaker_trips == 1 { "" } else { "s" },
                yes_no(p.outage_at_most_a_tenth_of_a_request_per_receipt),
                yes_no(p.none_dead_of_the_outage),
                yes_no(p.recovery_within_the_providers_limit),
                summary.measured.recovery_peak_rps,
                summary.measured.recovery_peak_sent_rps,
                yes_no(p.backlog_drained_in_time),
            );
        }
    }
    if !summary.kept_up && !args.json && summary.protection.is_some() {
        println!(
            "note: the worker delivered the backlog slower than the rate limit allows ({} against {} predicted): this machine is busy or slow at {:.0} requests a real second; `--scale {}` halves the pace",
            report::secs(summary.measured.backlog_drain_secs),
            report::secs(summary.simulated.backlog_drain_secs),
            summary
                .scenario
                .protection
                .as_ref()
                .and_then(|p| p.rate_limit)
                .map_or(0.0, |r| r.per_second * summary.scenario.scale),
            half_scale(summary.scenario.scale),
        );
    } else if !summary.kept_up && !args.json {
        println!(
            "note: the worker fell behind the scaled schedule (requests per fresh receipt {:.2} against {:.2} predicted): retries ran later than the policy says, \
             because this machine is busy or slow at {} requests a real second; `--scale {}` halves the pace",
            summary.measured.outage_requests_per_fresh_receipt,
            summary.simulated.outage.requests_per_fresh_job,
            (summary.simulated.outage.mean_rps * summary.scenario.scale).round(),
            half_scale(summary.scenario.scale),
        );
    }
    if ok {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "error: the demo's checks failed: undelivered {:?}, delivered twice {:?}",
            summary.checks.undelivered, summary.checks.delivered_twice
        );
        Ok(ExitCode::from(1))
    }
}

/// The chart's default file: a new `revenant-demo-XXXXXX.svg` in the system's
/// temporary directory (`TMPDIR`, else `/tmp`), kept after the demo exits.
///
/// Why there: not the current directory, which is usually a checkout (a chart once
/// landed in the repository that way); not beside the database, whose directory is
/// removed at the end unless `--keep`, and may be in `/dev/shm`, where a file costs
/// memory until reboot. A new name per run rather than a fixed one, so two demos at
/// once do not overwrite each other's chart, and so the file is created fresh
/// (never through a link someone left at a well-known name in a shared directory).
fn new_chart_file() -> std::io::Result<PathBuf> {
    let (_, path) = tempfile::Builder::new()
        .prefix("revenant-demo-")
        .suffix(".svg")
        .tempfile()?
        .keep()
        .map_err(|err| err.error)?;
    Ok(path)
}

/// The demo's directory: on a memory file system (`/dev/shm`) when the machine has
/// one, else in the system's temporary directory.
///
/// Why: the SQLite store runs with `synchronous = FULL`, so every write transaction
/// (each enqueue batch, claim, and batch of results) waits for an fsync. On the 2-core
/// VM this was built on, that made every attempt about 200 ms late in real time, which
/// at 60x is 12 simulated seconds added to every retry delay: the measured requests
/// per fresh receipt came out 25% below the simulator's (5.2 against 7.0) because the
/// disk, not the policy, spaced the retries. On tmpfs an fsync costs nothing and the
/// demo measures the policy. The store and its settings are the embedded default's
/// all the same; only the disk under it differs. `/dev/shm` is used only when `TMPDIR`
/// is unset: `TMPDIR=/tmp revenant demo` runs it on disk, to see the disk's effect.
fn temporary_dir() -> std::io::Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let builder = {
        let mut b = tempfile::Builder::new();
        b.prefix("revenant-demo-");
        b
    };
    if std::env::var_os("TMPDIR").is_none() && shm.is_dir() {
        if let Ok(dir) = builder.tempdir_in(shm) {
            return Ok(dir);
        }
    }
    builder.tempdir()
}

/// Half the scale, as `--scale` takes it: what the notes suggest when the machine did
/// not keep up.
fn half_scale(scale: f64) -> String {
    let half = (scale / 2.0).max(1.0);
    if half.fract() == 0.0 {
        format!("{half:.0}")
    } else {
        format!("{half:.1}")
    }
}

fn yes_no(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "NO"
    }
}

/// Enqueues the receipts as they arrive in simulated time, a batch per tick. Returns
/// the job ids, indexed by receipt number.
async fn produce(
    client: Client,
    scenario: Scenario,
    clock: SimClock,
    url: String,
    attempt_timeout: Duration,
) -> Result<Vec<JobId>, CliError> {
    let total = scenario.receipts;
    let mut ids = Vec::with_capacity(total as usize);
    // The request may use most of the attempt; the runtime cuts it there anyway.
    let timeout = format!("{}ms", (attempt_timeout.as_millis() * 9 / 10).max(1));
    let mut next = 0u64;
    let mut tick = tokio::time::interval(ENQUEUE_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while next < total {
        tick.tick().await;
        let due = ((clock.now() * scenario.rate).floor() as u64).min(total);
        if due <= next {
            continue;
        }
        let jobs = (next..due)
            .map(|k| receipt_job(k, &url, &timeout))
            .collect::<Vec<_>>();
        let enqueued = client.enqueue_many(jobs).await?;
        ids.extend(enqueued.into_iter().map(|e| e.id));
        next = due;
    }
    Ok(ids)
}

fn receipt_job(k: u64, url: &str, timeout: &str) -> NewJob {
    const RESTAURANTS: [&str; 5] = [
        "Trattoria Sole",
        "Le Petit Zinc",
        "Pho 99",
        "Casa Lupita",
        "The Green Bowl",
    ];
    let restaurant = if k == POISON_RECEIPT {
        POISON_RESTAURANT
    } else {
        RESTAURANTS[(k % 5) as usize]
    };
    let receipt = Receipt {
        receipt: k,
        email: format!("diner{k}@example.invalid"),
        restaurant: restaurant.to_string(),
        total_cents: 1200 + (k * 37) % 4000,
    };
    let payload = serde_json::json!({
        "method": "POST",
        "url": url,
        "body": receipt,
        "timeout": timeout,
        "dependency": DEPENDENCY,
    });
    NewJob::new(QUEUE, "http", payload).with_correlation_id(format!("receipt-{k}"))
}

/// The queue's numbers; all zero until the first enqueue creates the queue.
async fn queue_stats(store: &dyn Store) -> Result<Counts, CliError> {
    let stats = store
        .queue_stats(QueueStatsParams {
            queue: Some(QUEUE.to_string()),
            ..QueueStatsParams::default()
        })
        .await?;
    Ok(stats.first().map_or_else(Counts::default, |s| Counts {
        ready: s.ready,
        scheduled: s.scheduled,
        retrying: s.retrying,
        running: s.running,
        completed: s.completed,
        dead: s.dead,
    }))
}

/// The counts the demo watches, from `queue_stats`.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    ready: i64,
    scheduled: i64,
    retrying: i64,
    running: i64,
    completed: i64,
    dead: i64,
}

async fn count_dead(store: &dyn Store, reason: DeadReason) -> Result<u64, CliError> {
    let jobs = store
        .job_list(revenant::store::JobListParams {
            filter: JobFilter {
                queue: Some(QUEUE.to_string()),
                statuses: Some(vec![JobState::Dead]),
                dead_reason: Some(reason),
                ..JobFilter::default()
            },
            before_id: None,
            limit: 10_000,
        })
        .await?;
    Ok(jobs.len() as u64)
}

async fn get(store: &dyn Store, id: JobId) -> Result<revenant::Job, CliError> {
    store
        .job_get(JobGetParams { id })
        .await?
        .ok_or_else(|| CliError::Failed(format!("job {id} is gone")))
}
