//! Transactions: BEGIN, COMMIT, ROLLBACK, autocommit, and the writes run inside them.

use super::*;

impl Session {
    pub(super) fn explicit_open(&self) -> bool {
        self.ts.open && self.autocommit
    }

    pub fn status(&self) -> u16 {
        let mut st = 0;
        if self.autocommit {
            st |= proto::status::AUTOCOMMIT;
        }
        if self.ts.open && (self.ts.txn.is_some() || !self.autocommit || self.explicit_open()) {
            st |= proto::status::IN_TRANS;
        }
        st
    }

    /// A transaction that failed in the data node is gone: the session leaves it.
    pub(super) fn txn_error<T>(&mut self, r: Result<T, SqlError>) -> Result<T, SqlError> {
        if let Err(e) = &r
            && (matches!(e.class(), Some(ErrorClass::Temporary | ErrorClass::UnknownResult))
                || e.is(ErrorCode::TransactionAborted))
            && self.ts.txn.is_none()
        {
            self.ts.open = false;
        }
        r
    }

    pub(super) async fn run_write(&mut self, w: W<'_>, params: &[Value]) -> Result<write::WriteResult, SqlError> {
        let mut ts = std::mem::take(&mut self.ts);
        ts.durable = self.durable_commit();
        let r = {
            let env = Env { params, subs: Vec::new(), sess: &*self, newrow: None };
            let mut run = Runner { client: &self.client, ts: &mut ts, budget: self.budget(false) };
            let r = match w {
                W::Insert(p) => write::run_insert(&mut run, p, &env).await,
                W::Update(p) => write::run_update(&mut run, p, &env).await,
                W::Delete(p) => write::run_delete(&mut run, p, &env).await,
            };
            match r {
                Ok(w) => run.finish().await.map(|_| w),
                Err(e) => {
                    run.abandon();
                    Err(e)
                }
            }
        };
        self.ts = ts;
        self.txn_error(r)
    }

    pub(super) async fn commit(&mut self) -> Result<(), SqlError> {
        self.ts.open = false;
        if let Some(t) = self.ts.txn.take() {
            t.commit().await.map_err(SqlError::from)?;
        }
        Ok(())
    }

    pub(super) async fn rollback(&mut self) -> Result<(), SqlError> {
        self.ts.open = false;
        if let Some(t) = self.ts.txn.take() {
            t.rollback().await.map_err(SqlError::from)?;
        }
        Ok(())
    }

    /// BEGIN (committing what is open, as MySQL does), COMMIT, ROLLBACK.
    pub(super) async fn transaction_stmt(&mut self, stmt: &Statement) -> Result<Answer, SqlError> {
        match stmt {
            Statement::Begin => {
                self.commit().await?;
                self.ts.open = true;
                Ok(Answer::ok())
            }
            Statement::Commit => {
                self.commit().await?;
                Ok(Answer::ok())
            }
            Statement::Rollback => {
                self.rollback().await?;
                Ok(Answer::ok())
            }
            _ => unreachable!("a transaction statement"),
        }
    }
}
