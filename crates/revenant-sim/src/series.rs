//! Time series: what the provider saw and how deep the queue was, per bucket of time.
//!
//! [`Series`] is deliberately plain (public fields, no simulator types) so that
//! anything that measures an outage, such as `revenant demo` against a real worker,
//! can fill one in and draw it with [`crate::chart::traffic`].

use std::time::Duration;

use serde::Serialize;

/// One whole second of a simulation: what happened in it, and the queue at its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Second {
    /// Jobs enqueued in this second.
    pub arrived: u64,
    /// First attempts that reached the provider.
    pub fresh: u64,
    /// Retries that reached the provider.
    pub retries: u64,
    /// Jobs completed.
    pub completed: u64,
    /// Jobs dead-lettered.
    pub dead: u64,
    /// Of the jobs that arrived in this second, how many ended dead (whenever).
    pub dead_by_arrival: u64,
    /// Jobs `ready` at the end of the second: waiting out a backoff or due and
    /// waiting for a worker. What `revenant stats` counts as ready.
    pub waiting: u64,
    /// Of those, due and waiting for a worker: the design's "depth". Zero while
    /// workers are unlimited.
    pub due: u64,
}

/// One bucket of a [`Series`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Point {
    /// The bucket's start, in seconds from the start of the run.
    pub at_secs: f64,
    /// First attempts sent to the provider, per second (averaged over the bucket).
    pub fresh_per_sec: f64,
    /// Retries sent to the provider, per second (averaged over the bucket).
    pub retries_per_sec: f64,
    /// Jobs waiting (ready: in backoff or due) at the bucket's end.
    pub waiting: u64,
    /// Jobs completed in the bucket.
    pub completed: u64,
    /// Jobs dead-lettered in the bucket.
    pub dead: u64,
}

/// A run as a time series of equal buckets.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Series {
    /// The width of every bucket, in seconds.
    pub bucket_secs: f64,
    /// The buckets, in time order.
    pub points: Vec<Point>,
}

impl Series {
    /// Sums whole seconds into buckets of `bucket` (rounded to whole seconds, at
    /// least one). The last bucket may be partial; its rates are still per second of
    /// a full bucket, which slightly understates them.
    pub fn from_seconds(seconds: &[Second], bucket: Duration) -> Series {
        let width = bucket.as_secs().max(1) as usize;
        let points = seconds
            .chunks(width)
            .enumerate()
            .map(|(i, chunk)| {
                let sum = |f: fn(&Second) -> u64| chunk.iter().map(f).sum::<u64>();
                Point {
                    at_secs: (i * width) as f64,
                    fresh_per_sec: sum(|s| s.fresh) as f64 / width as f64,
                    retries_per_sec: sum(|s| s.retries) as f64 / width as f64,
                    waiting: chunk.last().map_or(0, |s| s.waiting),
                    completed: sum(|s| s.completed),
                    dead: sum(|s| s.dead),
                }
            })
            .collect();
        Series {
            bucket_secs: width as f64,
            points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_average_rates_and_keep_the_depth_at_their_end() {
        let second = |fresh, retries, waiting| Second {
            fresh,
            retries,
            waiting,
            ..Second::default()
        };
        let seconds = [second(10, 0, 5), second(12, 4, 7), second(8, 2, 1)];
        let series = Series::from_seconds(&seconds, Duration::from_secs(2));
        assert_eq!(series.bucket_secs, 2.0);
        assert_eq!(series.points.len(), 2);
        assert_eq!(series.points[0].fresh_per_sec, 11.0);
        assert_eq!(series.points[0].retries_per_sec, 2.0);
        assert_eq!(series.points[0].waiting, 7);
        assert_eq!(series.points[1].at_secs, 2.0);
        assert_eq!(series.points[1].waiting, 1);
    }
}
