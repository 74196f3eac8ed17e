//! A cluster's tasks.

use uuid::Uuid;

use super::transport::Client;
use crate::error::Result;
use crate::routes;
use crate::types::*;

impl Client {
    pub async fn list_tasks(&self, cluster: Uuid) -> Result<Vec<Task>> {
        self.get(&routes::tasks(cluster)).await
    }

    /// An unknown task id answers 500 on the real server, not 404.
    pub async fn get_task(&self, cluster: Uuid, task: Uuid) -> Result<Task> {
        self.get(&routes::task(cluster, task)).await
    }
}
