//! Periodic jobs on SQLite: the `schedules` table (migration 0006).
//!
//! A tick is enqueued by the worker whose compare-and-set on `next_tick` matches, in
//! the write transaction that inserts the job (through [`SqliteStore::enqueue_in`],
//! the one insert path). SQLite has one writer at a time, so a second worker's
//! compare-and-set runs after the first committed and matches nothing.

use revenant_core::schedule::{ScheduleRecord, ScheduleSpec};
use revenant_core::store::{
    ScheduleDeleteParams, ScheduleFireParams, ScheduleFired, SchedulePauseParams, ScheduleSetParams,
};
use revenant_core::StoreError;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use super::{clock, SqliteStore};
use crate::error::classify;
use crate::row::{get, get_time, timestamp};

const LIST: &str = "SELECT name, spec, paused, next_tick, last_tick, last_job, updated_at \
    FROM schedules ORDER BY name";

// A spec equal to the stored one changes nothing: workers declare their schedules at
// every start, and that must neither move a tick nor undo a pause.
const SET: &str = "INSERT INTO schedules (name, spec, paused, next_tick, updated_at) \
    VALUES (?1, ?2, 0, ?3, ?4) \
    ON CONFLICT (name) DO UPDATE \
    SET next_tick = CASE WHEN schedules.spec = excluded.spec THEN schedules.next_tick \
                         ELSE excluded.next_tick END, \
        updated_at = CASE WHEN schedules.spec = excluded.spec THEN schedules.updated_at \
                          ELSE excluded.updated_at END, \
        spec = excluded.spec";

const DELETE: &str = "DELETE FROM schedules WHERE name = ?1";

// Resuming a paused schedule starts from the next tick after now: ticks that fell while
// it was paused are not enqueued.
const PAUSE: &str = "UPDATE schedules \
    SET next_tick = CASE WHEN paused = 1 AND ?2 = 0 THEN ?3 ELSE next_tick END, paused = ?2 \
    WHERE name = ?1";

const ADVANCE: &str = "UPDATE schedules SET next_tick = ?3 \
    WHERE name = ?1 AND next_tick = ?2 AND paused = 0";

const RECORD: &str = "UPDATE schedules SET last_tick = ?2, last_job = ?3 WHERE name = ?1";

const EXISTS: &str = "SELECT 1 FROM schedules WHERE name = ?1";

impl SqliteStore {
    pub(super) async fn schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = sqlx::query(LIST)
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        let mut records = Vec::with_capacity(rows.len());
        for row in &rows {
            match schedule_from_row(row) {
                Ok(record) => records.push(record),
                Err(err) => {
                    let name: Option<String> = row.try_get("name").ok();
                    tracing::warn!(
                        name,
                        error = %err,
                        "skipping a stored schedule that cannot be decoded"
                    );
                }
            }
        }
        Ok(records)
    }

    pub(super) async fn schedule_put(&self, params: ScheduleSetParams) -> Result<(), StoreError> {
        params.validate()?;
        let spec = serde_json::to_string(&params.spec).map_err(StoreError::backend)?;
        let (_turn, mut tx) = self.write().await?;
        sqlx::query(SET)
            .bind(&params.spec.name)
            .bind(spec)
            .bind(params.next_tick.timestamp_millis())
            .bind(clock(params.now))
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(())
    }

    pub(super) async fn schedule_remove(
        &self,
        params: ScheduleDeleteParams,
    ) -> Result<bool, StoreError> {
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let done = sqlx::query(DELETE)
            .bind(&params.name)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(done.rows_affected() > 0)
    }

    pub(super) async fn schedule_set_paused(
        &self,
        params: SchedulePauseParams,
    ) -> Result<bool, StoreError> {
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let done = sqlx::query(PAUSE)
            .bind(&params.name)
            .bind(i64::from(params.paused))
            .bind(params.resume_at.timestamp_millis())
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(done.rows_affected() > 0)
    }

    pub(super) async fn schedule_tick(
        &self,
        params: ScheduleFireParams,
    ) -> Result<ScheduleFired, StoreError> {
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let ours = match params.advance {
            Some((expected, next)) => {
                sqlx::query(ADVANCE)
                    .bind(&params.name)
                    .bind(expected.timestamp_millis())
                    .bind(next.timestamp_millis())
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?
                    .rows_affected()
                    > 0
            }
            None => sqlx::query(EXISTS)
                .bind(&params.name)
                .fetch_optional(&mut *tx)
                .await
                .map_err(classify)?
                .is_some(),
        };
        if !ours {
            tx.rollback().await.map_err(classify)?;
            return Ok(ScheduleFired::Lost);
        }
        let (job, queues) = match &params.enqueue {
            Some(enqueue) => {
                let now = clock(enqueue.now.or(params.now));
                let payloads = super::serialize_payloads(enqueue)?;
                let (mut done, queues) = Self::enqueue_in(&mut tx, enqueue, &payloads, now).await?;
                (done.pop(), queues)
            }
            None => (None, Default::default()),
        };
        if let (Some(tick), Some(job)) = (params.tick, job) {
            sqlx::query(RECORD)
                .bind(&params.name)
                .bind(tick.timestamp_millis())
                .bind(job.id)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
        }
        tx.commit().await.map_err(classify)?;
        self.signal(&queues);
        Ok(ScheduleFired::Fired { job })
    }
}

fn schedule_from_row(row: &SqliteRow) -> Result<ScheduleRecord, StoreError> {
    let name: String = get(row, "name")?;
    let text: String = get(row, "spec")?;
    let spec: ScheduleSpec = serde_json::from_str(&text)
        .map_err(|err| StoreError::Corrupt(format!("schedules.spec of {name:?}: {err}")))?;
    spec.validate()
        .map_err(|err| StoreError::Corrupt(format!("schedules.spec of {name:?}: {err}")))?;
    if spec.name != name {
        return Err(StoreError::Corrupt(format!(
            "schedules.spec of {name:?} names {:?}",
            spec.name
        )));
    }
    Ok(ScheduleRecord {
        spec,
        paused: get::<i64>(row, "paused")? != 0,
        next_tick: timestamp(get(row, "next_tick")?, "schedules.next_tick")?,
        last_tick: get_time(row, "last_tick")?,
        last_job: get(row, "last_job")?,
        updated_at: timestamp(get(row, "updated_at")?, "schedules.updated_at")?,
    })
}
