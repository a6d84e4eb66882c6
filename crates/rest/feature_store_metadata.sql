-- The Hopsworks feature-store metadata that Tern's Feature Store REST API reads
-- (POST /0.1.0/feature_store and /0.1.0/batch_feature_store): the subset of Hopsworks 4.0's
-- `hopsworks` database that RonDB's REST server reads, with Hopsworks' table and column names.
-- Load it with any MySQL client:  mariadb -h 127.0.0.1 -P 3306 -u root < feature_store_metadata.sql
--
-- Registering a feature view (README "Feature store"): one feature_store row per store (its name
-- is the database of its online tables), one feature_group row per group (online table
-- `<name>_<version>` in the store's database), one feature_view row, one training_dataset_join
-- row per joined group (idx = join index, prefix of its features), one training_dataset_feature
-- row per feature (idx = output position, td_join = its join, label = 1 leaves it out), and one
-- serving_key row per primary-key column of each joined group (required = 0 with join_on: the
-- value comes from that entry of the request).

CREATE DATABASE IF NOT EXISTS hopsworks;
USE hopsworks;

CREATE TABLE IF NOT EXISTS feature_store (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  name VARCHAR(100) NOT NULL,
  project_id INT NOT NULL DEFAULT 0,
  created TIMESTAMP NULL
) ENGINE=ndbcluster;

CREATE TABLE IF NOT EXISTS feature_group (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  name VARCHAR(63) NOT NULL,
  feature_store_id INT NOT NULL,
  created TIMESTAMP NULL,
  creator INT NOT NULL DEFAULT 0,
  version INT NOT NULL,
  description VARCHAR(1000) NULL,
  feature_group_type INT NOT NULL DEFAULT 0,
  event_time VARCHAR(63) NULL,
  online_enabled TINYINT(1) NULL,
  KEY feature_store_id (feature_store_id)
) ENGINE=ndbcluster;

CREATE TABLE IF NOT EXISTS feature_view (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  name VARCHAR(63) NOT NULL,
  feature_store_id INT NOT NULL,
  created TIMESTAMP NULL,
  creator INT NOT NULL DEFAULT 0,
  version INT NOT NULL,
  description VARCHAR(1000) NULL,
  KEY feature_store_id (feature_store_id)
) ENGINE=ndbcluster;

CREATE TABLE IF NOT EXISTS training_dataset_join (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  training_dataset INT NULL,
  feature_group INT NULL,
  left_feature_group INT NULL,
  feature_group_commit_id BIGINT NULL,
  type TINYINT NOT NULL DEFAULT 0,
  idx INT NOT NULL DEFAULT 0,
  parent_idx INT NOT NULL DEFAULT 0,
  prefix VARCHAR(63) NULL,
  feature_view_id INT NULL,
  KEY tdj_feature_view_fk (feature_view_id)
) ENGINE=ndbcluster;

CREATE TABLE IF NOT EXISTS training_dataset_feature (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  training_dataset INT NULL,
  feature_group INT NULL,
  name VARCHAR(1000) NOT NULL,
  type VARCHAR(1000) NULL,
  td_join INT NULL,
  idx INT NULL,
  label TINYINT(1) NOT NULL DEFAULT 0,
  inference_helper_column TINYINT(1) NOT NULL DEFAULT 0,
  training_helper_column TINYINT(1) NOT NULL DEFAULT 0,
  feature_view_id INT NULL,
  KEY tdf_feature_view_fk (feature_view_id)
) ENGINE=ndbcluster;

CREATE TABLE IF NOT EXISTS serving_key (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  prefix VARCHAR(63) NULL DEFAULT '',
  feature_name VARCHAR(1000) NOT NULL,
  join_on VARCHAR(1000) NULL,
  join_index INT NOT NULL,
  feature_group_id INT NOT NULL,
  required TINYINT(1) NOT NULL DEFAULT 0,
  feature_view_id INT NULL,
  KEY feature_view_id (feature_view_id)
) ENGINE=ndbcluster;
