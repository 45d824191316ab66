-- The program of a pipeline the portable contract tests can run against
-- (feldera/target_test.go): every table materialized, so the tests read
-- them back with ad-hoc queries. Deploy it, start the pipeline, and set
-- FELDERA_TEST_URL, FELDERA_TEST_PIPELINE (and FELDERA_TEST_API_KEY).
CREATE TABLE c_keyed (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, score INT) WITH ('materialized' = 'true');
CREATE TABLE c_keyless (k INT, v VARCHAR) WITH ('materialized' = 'true');
CREATE TABLE "C_Quoted" ("Id" INT NOT NULL PRIMARY KEY, "Val" VARCHAR) WITH ('materialized' = 'true');
CREATE TABLE c_txn (id BIGINT NOT NULL PRIMARY KEY, v INT) WITH ('materialized' = 'true');
