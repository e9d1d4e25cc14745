-- Base: nothing but a marker that the store is initialised. Each capability adds its own file.
create table if not exists writ_meta (key text primary key, value text not null);
