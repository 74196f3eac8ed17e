//! Persistence: every record lives in an embedded redb database under the state
//! directory, one table per kind, one JSON value per record. Handlers mutate in-memory
//! tables that remember which keys they touched; [`Db::commit`] writes exactly those in
//! one durable transaction before the answer leaves, so a `kill -9` at any moment loses
//! nothing that was acknowledged and never leaves half an operation behind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::SimError;

/// A keyed set of records that tracks its unsaved changes.
#[derive(Debug, Clone)]
pub struct Table<T> {
    rows: BTreeMap<String, T>,
    dirty: BTreeSet<String>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self {
            rows: BTreeMap::new(),
            dirty: BTreeSet::new(),
        }
    }
}

impl<T: Serialize + DeserializeOwned> Table<T> {
    pub fn get(&self, key: &str) -> Option<&T> {
        self.rows.get(key)
    }

    /// Mutable access marks the record as changed.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut T> {
        let row = self.rows.get_mut(key)?;
        self.dirty.insert(key.to_string());
        Some(row)
    }

    pub fn insert(&mut self, key: impl Into<String>, value: T) {
        let key = key.into();
        self.dirty.insert(key.clone());
        self.rows.insert(key, value);
    }

    pub fn remove(&mut self, key: &str) -> Option<T> {
        let v = self.rows.remove(key)?;
        self.dirty.insert(key.to_string());
        Some(v)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.rows.contains_key(key)
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.rows.values()
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.rows.keys()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Mutate every record matching `pred` (each marked changed).
    pub fn update_where(&mut self, mut pred: impl FnMut(&T) -> bool, mut f: impl FnMut(&mut T)) {
        for (k, v) in self.rows.iter_mut() {
            if pred(v) {
                f(v);
                self.dirty.insert(k.clone());
            }
        }
    }

    /// Remove every record matching `pred` (each marked changed).
    pub fn remove_where(&mut self, mut pred: impl FnMut(&T) -> bool) {
        let dirty = &mut self.dirty;
        self.rows.retain(|key, row| {
            let matches = pred(row);
            if matches {
                dirty.insert(key.clone());
            }
            !matches
        });
    }

    /// Writes the changed records into `txn`. They stay marked until the transaction
    /// commits, so a failed commit can still be rolled back.
    fn flush(&self, name: &str, txn: &redb::WriteTransaction) -> Result<(), SimError> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        let def: TableDefinition<&str, &[u8]> = TableDefinition::new(name);
        let mut table = txn.open_table(def).map_err(SimError::db)?;
        for key in &self.dirty {
            match self.rows.get(key) {
                Some(row) => {
                    let bytes = serde_json::to_vec(row).map_err(SimError::encode)?;
                    table
                        .insert(key.as_str(), bytes.as_slice())
                        .map_err(SimError::db)?;
                }
                None => {
                    table.remove(key.as_str()).map_err(SimError::db)?;
                }
            }
        }
        Ok(())
    }

    /// Puts every changed record back as the database holds it.
    fn rollback(&mut self, name: &str, txn: &redb::ReadTransaction) -> Result<(), SimError> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        let def: TableDefinition<&str, &[u8]> = TableDefinition::new(name);
        let table = match txn.open_table(def) {
            Ok(t) => Some(t),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(SimError::db(e)),
        };
        for key in std::mem::take(&mut self.dirty) {
            let stored = match &table {
                Some(t) => t.get(key.as_str()).map_err(SimError::db)?,
                None => None,
            };
            match stored {
                Some(v) => {
                    let row: T =
                        serde_json::from_slice(v.value()).map_err(|e| SimError::Corrupt {
                            table: name.to_string(),
                            key: key.clone(),
                            reason: e.to_string(),
                        })?;
                    self.rows.insert(key, row);
                }
                None => {
                    self.rows.remove(&key);
                }
            }
        }
        Ok(())
    }

    fn load(name: &str, db: &redb::Database) -> Result<Self, SimError> {
        let def: TableDefinition<&str, &[u8]> = TableDefinition::new(name);
        let txn = db.begin_read().map_err(SimError::db)?;
        let table = match txn.open_table(def) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Self::default()),
            Err(e) => return Err(SimError::db(e)),
        };
        let mut rows = BTreeMap::new();
        for item in table.iter().map_err(SimError::db)? {
            let (k, v) = item.map_err(SimError::db)?;
            let row: T = serde_json::from_slice(v.value()).map_err(|e| SimError::Corrupt {
                table: name.to_string(),
                key: k.value().to_string(),
                reason: e.to_string(),
            })?;
            rows.insert(k.value().to_string(), row);
        }
        Ok(Self {
            rows,
            dirty: BTreeSet::new(),
        })
    }
}

/// Lists every persisted table once, so load and commit cannot drift apart.
macro_rules! tables {
    ($($field:ident : $ty:ty),+ $(,)?) => {
        /// Every persisted record kind.
        #[derive(Debug, Default, Clone)]
        pub struct Tables {
            $(pub $field: Table<$ty>,)+
        }

        impl Tables {
            fn load(db: &redb::Database) -> Result<Self, SimError> {
                Ok(Self { $($field: Table::load(stringify!($field), db)?,)+ })
            }

            fn flush(&self, txn: &redb::WriteTransaction) -> Result<(), SimError> {
                $(self.$field.flush(stringify!($field), txn)?;)+
                Ok(())
            }

            fn mark_clean(&mut self) {
                $(self.$field.dirty.clear();)+
            }

            fn rollback(&mut self, txn: &redb::ReadTransaction) -> Result<(), SimError> {
                $(self.$field.rollback(stringify!($field), txn)?;)+
                Ok(())
            }

            pub fn is_dirty(&self) -> bool {
                false $(|| self.$field.is_dirty())+
            }
        }
    };
}

use crate::model::*;

tables!(
    meta: Meta,
    clusters: ClusterRec,
    nodes: NodeRec,
    devices: DeviceRec,
    tasks: TaskRec,
    jobs: JobRec,
    pools: PoolRec,
    volumes: VolumeRec,
    snapshots: SnapshotRec,
    migrations: MigrationRec,
    targets: TargetRec,
    policies: PolicyRec,
    replications: ReplicationRec,
    workers: WorkerRec,
    groups: GroupRec,
    backups: BackupRec,
    backup_policies: BackupPolicyRec,
    backup_attachments: BackupAttachmentRec,
    object_stores: ObjectStoreRec,
);

/// The database handle.
pub struct Db {
    db: redb::Database,
}

impl Db {
    /// Open (or create) `state.redb` in `dir`.
    pub fn open(dir: &Path) -> Result<Self, SimError> {
        std::fs::create_dir_all(dir).map_err(|e| SimError::StateDir {
            dir: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        let path = dir.join("state.redb");
        let db = redb::Database::create(&path).map_err(|e| SimError::StateDir {
            dir: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        Ok(Self { db })
    }

    pub fn load(&self) -> Result<Tables, SimError> {
        Tables::load(&self.db)
    }

    /// Write every changed record in one durable transaction. On failure the records stay
    /// marked changed, for [`Db::rollback`].
    pub fn commit(&self, tables: &mut Tables) -> Result<(), SimError> {
        if !tables.is_dirty() {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(SimError::db)?;
        tables.flush(&txn)?;
        txn.commit().map_err(SimError::db)?;
        tables.mark_clean();
        Ok(())
    }

    /// Undo every uncommitted change in memory: each changed record is read back from
    /// the database, or dropped when the database has none.
    pub fn rollback(&self, tables: &mut Tables) -> Result<(), SimError> {
        if !tables.is_dirty() {
            return Ok(());
        }
        let txn = self.db.begin_read().map_err(SimError::db)?;
        tables.rollback(&txn)
    }
}
