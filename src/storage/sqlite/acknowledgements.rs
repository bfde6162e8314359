use async_trait::async_trait;

use super::Sqlite;
use crate::storage::acknowledgements::{Acknowledgement, Acknowledgements};
use crate::storage::Result;

const COLUMNS: &str = "broker, rule, vhost, subject, fingerprint, reason, actor, at";

#[async_trait]
impl Acknowledgements for Sqlite {
    async fn acknowledge(&self, ack: &Acknowledgement) -> Result<()> {
        sqlx::query(&format!(
            "insert into advisor_acknowledgements ({COLUMNS}) values (?, ?, ?, ?, ?, ?, ?, ?)
             on conflict (broker, rule, vhost, subject) do update set
                 fingerprint = excluded.fingerprint, reason = excluded.reason,
                 actor = excluded.actor, at = excluded.at"
        ))
        .bind(&ack.broker)
        .bind(&ack.rule)
        .bind(&ack.vhost)
        .bind(&ack.subject)
        .bind(&ack.fingerprint)
        .bind(&ack.reason)
        .bind(&ack.actor)
        .bind(ack.at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn unacknowledge(
        &self,
        broker: &str,
        rule: &str,
        vhost: &str,
        subject: &str,
    ) -> Result<Option<Acknowledgement>> {
        // In a transaction: the row removed is reported only once the removal is committed.
        let mut tx = self.pool.begin().await?;
        let removed = sqlx::query_as(&format!(
            "delete from advisor_acknowledgements where broker = ? and rule = ? and vhost = ? and subject = ? returning {COLUMNS}"
        ))
        .bind(broker)
        .bind(rule)
        .bind(vhost)
        .bind(subject)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(removed)
    }

    async fn acknowledgements(&self, broker: &str) -> Result<Vec<Acknowledgement>> {
        sqlx::query_as(&format!(
            "select {COLUMNS} from advisor_acknowledgements where broker = ? order by rule, vhost, subject"
        ))
        .bind(broker)
        .fetch_all(&self.pool)
        .await
    }
}
