//! Periodic jobs on PostgreSQL: the `schedules` table (migration 0006).
//!
//! A tick is enqueued by the worker whose compare-and-set on `next_tick` matches,
//! in the transaction that inserts the job (through [`PgStore::enqueue_on`], the one
//! insert path): a concurrent worker's UPDATE waits on the row lock, then finds
//! `next_tick` moved and matches nothing.

use revenant_core::schedule::{ScheduleRecord, ScheduleSpec};
use revenant_core::store::{
    ScheduleDeleteParams, ScheduleFireParams, ScheduleFired, SchedulePauseParams, ScheduleSetParams,
};
use revenant_core::{StoreError, Timestamp};
use sqlx::postgres::PgRow;
use sqlx::{Acquire, Row};

use super::PgStore;
use crate::error::ResultExt;
use crate::sql::{quote_ident, render};

const LIST: &str = "SELECT name, spec, paused, next_tick, last_tick, last_job, updated_at \
    FROM {schema}.schedules ORDER BY name COLLATE \"C\"";

// A spec equal to the stored one changes nothing: workers declare their schedules at
// every start, and that must neither move a tick nor undo a pause.
const SET: &str = "INSERT INTO {schema}.schedules AS s (name, spec, paused, next_tick, updated_at) \
    VALUES ($1, $2::text::jsonb, false, $3, \
            date_trunc('milliseconds', coalesce($4::timestamptz, now()))) \
    ON CONFLICT (name) DO UPDATE \
    SET spec = excluded.spec, \
        next_tick = CASE WHEN s.spec = excluded.spec THEN s.next_tick ELSE excluded.next_tick END, \
        updated_at = CASE WHEN s.spec = excluded.spec THEN s.updated_at ELSE excluded.updated_at END";

const DELETE: &str = "DELETE FROM {schema}.schedules WHERE name = $1";

// Resuming a paused schedule starts from the next tick after now: ticks that fell while
// it was paused are not enqueued.
const PAUSE: &str = "UPDATE {schema}.schedules \
    SET next_tick = CASE WHEN paused AND NOT $2 THEN $3 ELSE next_tick END, paused = $2 \
    WHERE name = $1";

const ADVANCE: &str = "UPDATE {schema}.schedules SET next_tick = $3 \
    WHERE name = $1 AND next_tick = $2 AND NOT paused";

const RECORD: &str = "UPDATE {schema}.schedules SET last_tick = $2, last_job = $3 WHERE name = $1";

const EXISTS: &str = "SELECT 1 FROM {schema}.schedules WHERE name = $1";

impl PgStore {
    fn schedule_sql(&self, template: &str) -> String {
        render(template, &quote_ident(&self.inner.schema))
    }

    pub(super) async fn schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = sqlx::query(&self.schedule_sql(LIST))
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
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
        sqlx::query(&self.schedule_sql(SET))
            .bind(&params.spec.name)
            .bind(spec)
            .bind(params.next_tick)
            .bind(params.now)
            .execute(&self.inner.pool)
            .await
            .classified()?;
        Ok(())
    }

    pub(super) async fn schedule_remove(
        &self,
        params: ScheduleDeleteParams,
    ) -> Result<bool, StoreError> {
        params.validate()?;
        let done = sqlx::query(&self.schedule_sql(DELETE))
            .bind(&params.name)
            .execute(&self.inner.pool)
            .await
            .classified()?;
        Ok(done.rows_affected() > 0)
    }

    pub(super) async fn schedule_set_paused(
        &self,
        params: SchedulePauseParams,
    ) -> Result<bool, StoreError> {
        params.validate()?;
        let done = sqlx::query(&self.schedule_sql(PAUSE))
            .bind(&params.name)
            .bind(params.paused)
            .bind(params.resume_at)
            .execute(&self.inner.pool)
            .await
            .classified()?;
        Ok(done.rows_affected() > 0)
    }

    pub(super) async fn schedule_tick(
        &self,
        params: ScheduleFireParams,
    ) -> Result<ScheduleFired, StoreError> {
        params.validate()?;
        let mut conn = self.inner.pool.acquire().await.classified()?;
        let mut tx = conn.begin().await.classified()?;
        let ours = match params.advance {
            Some((expected, next)) => {
                sqlx::query(&self.schedule_sql(ADVANCE))
                    .bind(&params.name)
                    .bind(expected)
                    .bind(next)
                    .execute(&mut *tx)
                    .await
                    .classified()?
                    .rows_affected()
                    > 0
            }
            None => sqlx::query(&self.schedule_sql(EXISTS))
                .bind(&params.name)
                .fetch_optional(&mut *tx)
                .await
                .classified()?
                .is_some(),
        };
        if !ours {
            tx.rollback().await.classified()?;
            return Ok(ScheduleFired::Lost);
        }
        let (job, due) = match &params.enqueue {
            Some(enqueue) => {
                let (mut done, due) = self.enqueue_on(&mut tx, enqueue).await?;
                (done.pop(), due)
            }
            None => (None, Vec::new()),
        };
        if let (Some(tick), Some(job)) = (params.tick, job) {
            sqlx::query(&self.schedule_sql(RECORD))
                .bind(&params.name)
                .bind(tick)
                .bind(job.id)
                .execute(&mut *tx)
                .await
                .classified()?;
        }
        tx.commit().await.classified()?;
        self.announce(due);
        Ok(ScheduleFired::Fired { job })
    }
}

fn schedule_from_row(row: &PgRow) -> Result<ScheduleRecord, StoreError> {
    let name: String = row.try_get("name").classified()?;
    let json: serde_json::Value = row.try_get("spec").classified()?;
    let spec: ScheduleSpec = serde_json::from_value(json)
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
        paused: row.try_get("paused").classified()?,
        next_tick: row.try_get::<Timestamp, _>("next_tick").classified()?,
        last_tick: row
            .try_get::<Option<Timestamp>, _>("last_tick")
            .classified()?,
        last_job: row.try_get("last_job").classified()?,
        updated_at: row.try_get::<Timestamp, _>("updated_at").classified()?,
    })
}
